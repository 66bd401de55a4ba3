const { Kafka } = require('kafkajs');
const kafka = new Kafka({ clientId: 'order-processor', brokers: ['localhost:9092']});
const consumer = kafka.consumer({ groupId: 'order-processing'});
async function consume() { await consumer.connect(); await consumer.subscribe({ topic: 'orders', fromBeginning: true });
await consumer.run({ eachMessage: async ({ topic, partition, message, heartbeat }) => { const order = JSON.parse(message.value.toString()); const key = message.key?.toString();
console.log( `Partition: ${partition}, ` + `Offset: ${message.offset}, ` + `Key: ${key}` ); console.log(`Processing: ${order.orderId}`);
// Process the order
  await processOrder(order);
// Heartbeat to prevent rebalance during
// long processing
  await heartbeat(); }, // Manual offset management
  autoCommit: false, eachBatch: async ({ batch, resolveOffset, commitOffsetsIfNecessary }) => { for (const message of batch.messages) { const order = JSON.parse( message.value.toString() ); await processOrder(order); resolveOffset(message.offset); await commitOffsetsIfNecessary(); } } });}
async function processOrder(order) { console.log(`Order ${order.orderId} processed`);}
consume().catch(console.error);
