const { Kafka, Partitioners } = require('kafkajs');
const kafka = new Kafka({ clientId: 'order-service', brokers: ['localhost:9092'],});
const producer = kafka.producer({ allowAutoTopicCreation: false, idempotent: true, // Exactly-once producer
  transactionalId: 'order-producer-1', // For transactions
});
async function publishOrders() { await producer.connect();
// Send a single message
  await producer.send({ topic: 'orders', messages: [ { key: 'CUST-42', value: JSON.stringify({ orderId: 'ORD-001', customerId: 'CUST-42', items: ['widget', 'gadget'], total: 149.99 }), headers: { source: 'order-service', version: '1.0' } } ] });
// Send a batch of messages
  await producer.sendBatch({ topicMessages: [ { topic: 'orders', messages: [ { key: 'CUST-1', value: JSON.stringify({ orderId: 'ORD-002', total: 29.99 })}, { key: 'CUST-2', value: JSON.stringify({ orderId: 'ORD-003', total: 59.99 })} ] }, { topic: 'analytics', messages: [ { value: JSON.stringify({ event: 'order_created', count: 2 })} ] } ] });
await producer.disconnect();}
publishOrders().catch(console.error);
