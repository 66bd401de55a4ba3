#!/usr/bin/env bash
# Builds a local base image for compose/Dockerfile on machines that cannot pull from an image
# registry: a Debian root made with debootstrap, imported with `docker import`.
#
# The root holds what both images of the stack need, so that building them needs no network:
#   - python3 and python3-venv (Debian's Python 3.11), and a virtualenv in /opt/kafkalite/venv
#     with kafkalite's dependencies (setup.cfg install_requires, setuptools
#     and wheel). The wheels are downloaded by the HOST's pip (its index, proxy and CA settings
#     apply) and installed inside the root with --no-index: nothing inside the image reaches PyPI.
#   - default-jre-headless, libzookeeper-java and libslf4j-java: Debian's ZooKeeper (3.8), for
#     the zookeeper service (the jars only; Debian's `zookeeper` package would pull a desktop JRE).
#
# The root is packed as a tarball in the cache directory, named by a key over this script and
# the dependency list: later runs only `docker import` it (seconds) instead of bootstrapping
# again (minutes). Downloaded .deb files are kept there too.
#
# Then build the stack on top of it:
#   compose/build-base-image.sh                       # prints the image name, e.g. kafkalite-base:bookworm-1a2b3c4d5e6f
#   KAFKALITE_BASE_IMAGE=kafkalite-base:bookworm-1a2b3c4d5e6f docker-compose -f compose/docker-compose.yml build
#
# Requirements: root, debootstrap, a Python 3.11 with pip on the host (the project's .venv,
# $KAFKALITE_PYTHON or python3), Debian's package mirror, and docker (unless --no-import).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"

usage() {
    cat <<'EOF'
Usage: compose/build-base-image.sh [--cache-dir DIR] [--tag NAME] [--suite SUITE] [--mirror URL]
                                   [--no-import] [--force] [--print-key]

Options:
  --cache-dir DIR   where the root tarball and .deb files are kept
                    (default /var/cache/kafkalite-ci, or $KAFKALITE_CI_CACHE)
  --tag NAME        image name without tag (default kafkalite-base); the tag is SUITE-KEY
  --suite SUITE     Debian suite (default bookworm: its python3 is 3.11, like the host's)
  --mirror URL      Debian mirror (default http://deb.debian.org/debian)
  --no-import       build (or reuse) the tarball only; print its path
  --force           bootstrap again even when the cached tarball exists
  --print-key       print the cache key and exit
  -h, --help        this help

Prints the image name (NAME:SUITE-KEY) on the last line of stdout. Exit status: 0 done,
1 a step failed, 2 bad arguments.
EOF
}

cache_dir="${KAFKALITE_CI_CACHE:-/var/cache/kafkalite-ci}"
name="kafkalite-base"
suite="bookworm"
mirror="http://deb.debian.org/debian"
import=true
force=false
print_key=false
while [[ $# -gt 0 ]]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --cache-dir|--tag|--suite|--mirror)
            [[ $# -ge 2 && -n "$2" ]] || { echo "Error: $1 needs a value" >&2; usage >&2; exit 2; }
            case "$1" in
                --cache-dir) cache_dir="$2" ;;
                --tag) name="$2" ;;
                --suite) suite="$2" ;;
                --mirror) mirror="$2" ;;
            esac
            shift 2 ;;
        --no-import) import=false; shift ;;
        --force) force=true; shift ;;
        --print-key) print_key=true; shift ;;
        *) echo "Error: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
done

say() { echo "build-base-image: $*" >&2; }
fail() { echo "Error: $*" >&2; exit 1; }

if [[ -n "${KAFKALITE_PYTHON:-}" ]]; then
    host_python="$KAFKALITE_PYTHON"
elif [[ -x "$repo/.venv/bin/python" ]]; then
    host_python="$repo/.venv/bin/python"
else
    host_python="$(command -v python3 || true)"
fi
[[ -n "$host_python" ]] || fail "no Python found on the host to download wheels with"

# kafkalite's runtime requirements, one a line, from setup.cfg (install_requires).
requirements="$("$host_python" - "$repo/setup.cfg" <<'PYTHON'
import configparser
import sys

parser = configparser.ConfigParser()
parser.read(sys.argv[1])
lines = parser["options"]["install_requires"].splitlines()
lines += ["setuptools>=64", "wheel"]
print("\n".join(line.strip() for line in lines if line.strip()))
PYTHON
)"
debian_packages="python3,python3-venv,default-jre-headless,libzookeeper-java,libslf4j-java"
key="$( { cat "${BASH_SOURCE[0]}"; echo "$requirements"; echo "$suite $debian_packages"; } | sha256sum | cut -c1-12)"
image="$name:$suite-$key"
tarball="$cache_dir/$name-$suite-$key.tar"
if $print_key; then
    echo "$key"
    exit 0
fi

if [[ "$force" == true || ! -s "$tarball" ]]; then
    [[ "$(id -u)" -eq 0 ]] || fail "debootstrap needs root"
    command -v debootstrap >/dev/null || fail "debootstrap is not installed (apt-get install debootstrap)"
    python_version="$("$host_python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    [[ "$python_version" == "3.11" ]] \
        || fail "the host's Python is $python_version; the wheels must be for 3.11, the Python of Debian $suite"
    mkdir -p "$cache_dir/debs"
    work="$(mktemp -d "$cache_dir/build.XXXXXX")"
    root="$work/root"
    cleanup() {
        local mount_point
        # debootstrap mounts proc and sys inside the root; never delete through a mount
        for mount_point in "$root/proc" "$root/sys" "$root/dev/pts"; do
            if mountpoint -q "$mount_point" 2>/dev/null; then
                umount -l "$mount_point" || true
            fi
        done
        rm -rf --one-file-system "$work"
    }
    trap cleanup EXIT
    started=$SECONDS
    say "debootstrap $suite ($debian_packages) into $root"
    eatmydata=()
    if command -v eatmydata >/dev/null; then eatmydata=(eatmydata); fi
    if ! "${eatmydata[@]}" debootstrap --variant=minbase --cache-dir="$cache_dir/debs" \
            --include="$debian_packages" "$suite" "$root" "$mirror" > "$work/debootstrap.log" 2>&1; then
        tail -n 30 "$work/debootstrap.log" >&2
        fail "debootstrap failed (log above)"
    fi
    say "debootstrap done in $((SECONDS - started)) s; downloading wheels with $host_python"
    mkdir -p "$root/tmp/wheels"
    echo "$requirements" > "$root/tmp/wheels/requirements.txt"
    if ! "$host_python" -m pip download --quiet --only-binary=:all: --dest "$root/tmp/wheels" \
            -r "$root/tmp/wheels/requirements.txt" > "$work/pip.log" 2>&1; then
        cat "$work/pip.log" >&2
        fail "downloading wheels failed (log above)"
    fi
    say "creating /opt/kafkalite/venv inside the root"
    if ! { chroot "$root" python3 -m venv /opt/kafkalite/venv &&
           chroot "$root" /opt/kafkalite/venv/bin/python -m pip install --quiet --no-index --no-cache-dir \
               --disable-pip-version-check --find-links /tmp/wheels -r /tmp/wheels/requirements.txt; } \
            > "$work/venv.log" 2>&1; then
        cat "$work/venv.log" >&2
        fail "installing the wheels inside the root failed (log above)"
    fi
    rm -rf "$root/tmp/wheels" "$root/var/cache/apt/archives/"*.deb "$root/var/lib/apt/lists/"*
    find "$root/opt/kafkalite/venv" -name __pycache__ -prune -exec rm -rf {} +
    say "packing $tarball"
    tar --numeric-owner --one-file-system -C "$root" -cf "$tarball.partial" .
    mv "$tarball.partial" "$tarball"
    say "base root ready in $((SECONDS - started)) s ($(du -h "$tarball" | cut -f1))"
else
    say "reusing $tarball"
fi

if ! $import; then
    echo "$tarball"
    exit 0
fi
command -v docker >/dev/null || fail "docker is not installed"
say "docker import as $image"
docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' \
    "$tarball" "$image" >/dev/null
echo "$image"
