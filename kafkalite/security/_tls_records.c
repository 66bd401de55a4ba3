/* kafkalite.security._tls_records: decrypts every TLS record waiting in an ssl.SSLObject's
 * incoming memory BIO into one buffer, releasing the interpreter lock once for all of them.
 *
 * ssl.SSLObject.read() decrypts at most one TLS record (16 KiB) per call and releases and
 * takes the interpreter lock again around it; a 4 MiB fetch answer is 256 such calls, and in
 * a process whose other thread keeps the lock busy each of them can wait up to the switch
 * interval to get it back. read_records() runs OpenSSL's SSL_read_ex in a loop instead, with
 * the lock released for the whole loop.
 *
 * It calls the OpenSSL of Python's own _ssl module (bind() looks its functions up through that
 * module's handle, so the SSL object and the functions always come from the same library) and
 * finds the SSL object in the _ssl._SSLSocket the way CPython lays it out: the first field
 * after the object header is the socket weak reference, the second the SSL pointer. bind()
 * refuses a type that is not _ssl._SSLSocket, and read_records() checks that the SSL object's
 * application data points back at the Python object (CPython sets it so) before it reads.
 *
 * Concurrency: read_records() must not run while another thread uses the same SSLObject
 * (kafkalite calls it only on the connection's event-loop thread).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stddef.h>
#include <string.h>

typedef int (*ssl_read_ex_function)(void *ssl, void *buffer, size_t size, size_t *read);
typedef int (*ssl_get_error_function)(const void *ssl, int result);
typedef void *(*ssl_get_ex_data_function)(const void *ssl, int index);
typedef void (*err_clear_error_function)(void);

static ssl_read_ex_function ssl_read_ex = NULL;
static ssl_get_error_function ssl_get_error = NULL;
static ssl_get_ex_data_function ssl_get_ex_data = NULL;
static err_clear_error_function err_clear_error = NULL;
static PyTypeObject *ssl_socket_type = NULL;

/* The front of CPython's PySSLSocket (Modules/_ssl.c). */
typedef struct {
    PyObject_HEAD
    PyObject *socket;
    void *ssl;
} ssl_socket_front;

/* SSL_ERROR_* values (OpenSSL's ssl.h, stable since 0.9.x). */
#define READ_OK 0

static PyObject *
bind(PyObject *module, PyObject *args)
{
    const char *library_path;
    PyObject *socket_type;
    if (!PyArg_ParseTuple(args, "sO:bind", &library_path, &socket_type)) {
        return NULL;
    }
    if (!PyType_Check(socket_type) || strcmp(((PyTypeObject *)socket_type)->tp_name, "_ssl._SSLSocket") != 0) {
        PyErr_SetString(PyExc_TypeError, "bind() wants the type _ssl._SSLSocket");
        return NULL;
    }
    if (((PyTypeObject *)socket_type)->tp_basicsize < (Py_ssize_t)sizeof(ssl_socket_front)) {
        Py_RETURN_FALSE;
    }
    void *handle = dlopen(library_path, RTLD_NOW | RTLD_NOLOAD);
    if (handle == NULL) {
        Py_RETURN_FALSE;
    }
    ssl_read_ex_function read_ex = (ssl_read_ex_function)dlsym(handle, "SSL_read_ex");
    ssl_get_error_function get_error = (ssl_get_error_function)dlsym(handle, "SSL_get_error");
    ssl_get_ex_data_function get_ex_data = (ssl_get_ex_data_function)dlsym(handle, "SSL_get_ex_data");
    err_clear_error_function clear_error = (err_clear_error_function)dlsym(handle, "ERR_clear_error");
    if (read_ex == NULL || get_error == NULL || get_ex_data == NULL || clear_error == NULL) {
        dlclose(handle);
        Py_RETURN_FALSE;
    }
    /* the handle stays open: the functions are used for the life of the process */
    ssl_read_ex = read_ex;
    ssl_get_error = get_error;
    ssl_get_ex_data = get_ex_data;
    err_clear_error = clear_error;
    Py_INCREF(socket_type);
    Py_XSETREF(ssl_socket_type, (PyTypeObject *)socket_type);
    Py_RETURN_TRUE;
}

static void *
ssl_of(PyObject *ssl_socket)
{
    if (ssl_read_ex == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "bind() has not found OpenSSL");
        return NULL;
    }
    if (Py_TYPE(ssl_socket) != ssl_socket_type) {
        PyErr_SetString(PyExc_TypeError, "read_records() wants an _ssl._SSLSocket (SSLObject._sslobj)");
        return NULL;
    }
    void *ssl = ((ssl_socket_front *)ssl_socket)->ssl;
    if (ssl == NULL || ssl_get_ex_data(ssl, 0) != (void *)ssl_socket) {
        PyErr_SetString(PyExc_TypeError, "the _ssl._SSLSocket is not laid out as expected");
        return NULL;
    }
    return ssl;
}

static PyObject *
check(PyObject *module, PyObject *ssl_socket)
{
    if (ssl_of(ssl_socket) == NULL) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
read_records(PyObject *module, PyObject *args)
{
    PyObject *ssl_socket;
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "Ow*:read_records", &ssl_socket, &view)) {
        return NULL;
    }
    void *ssl = ssl_of(ssl_socket);
    if (ssl == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    char *start = (char *)view.buf;
    size_t room = (size_t)view.len;
    size_t total = 0;
    int status = READ_OK;
    Py_BEGIN_ALLOW_THREADS
    err_clear_error();
    while (total < room) {
        size_t count = 0;
        if (!ssl_read_ex(ssl, start + total, room - total, &count)) {
            status = ssl_get_error(ssl, 0);
            break;
        }
        total += count;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return Py_BuildValue("(ni)", (Py_ssize_t)total, status);
}

static PyMethodDef methods[] = {
    {"bind", bind, METH_VARARGS,
     "bind(library_path, socket_type) -> bool: find OpenSSL's functions through the already loaded\n"
     "module at library_path (Python's _ssl); False when they cannot be found."},
    {"check", check, METH_O,
     "check(ssl_socket) -> None: raise TypeError unless read_records() can read ssl_socket."},
    {"read_records", read_records, METH_VARARGS,
     "read_records(ssl_socket, buffer) -> (bytes_read, ssl_error): decrypt records from the SSLObject's\n"
     "_sslobj into buffer until it is full (ssl_error 0) or OpenSSL stops with an SSL_ERROR_* code\n"
     "(2: wants more input; 6: the peer closed TLS; others: call SSLObject.read() for the exception)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_definition = {
    PyModuleDef_HEAD_INIT, "kafkalite.security._tls_records",
    "Decrypting the TLS records waiting in an SSLObject with the interpreter lock released once.",
    -1, methods,
};

PyMODINIT_FUNC
PyInit__tls_records(void)
{
    return PyModule_Create(&module_definition);
}
