// Sends one message of each kind (NORMAL, FIFO, DELAY, TRANSACTION committed) with the official
// Node client (rocketmq-client-nodejs, pinned in package.json) to the broker whose endpoint is
// the first argument, and prints one JSON line per message on stdout:
//   {"kind": "...", "messageId": "...", ...}
// Exit 0 when all four were sent (and the transaction committed), 1 on any failure. The client's
// own log goes to stderr. A hard deadline makes sure the script never hangs (the client waits
// forever for a Settings reply, spec section 3.2).
//
// Usage: node send_all_kinds.mjs 127.0.0.1:8081 [TOPIC] [DELAY_MS]

import { format } from 'node:util';
import client from 'rocketmq-client-nodejs';
import definition from 'rocketmq-client-nodejs/proto/apache/rocketmq/v2/definition_pb.js';

const { Producer } = client;
const { TransactionResolution } = definition;

const DEADLINE_MS = 60_000;
const REQUEST_TIMEOUT_MS = 5_000;

const [ endpoint, topic = 'NodeTopic', delayArg = '3000' ] = process.argv.slice(2);
if (!endpoint) {
  process.stderr.write('usage: node send_all_kinds.mjs HOST:PORT [TOPIC] [DELAY_MS]\n');
  process.exit(2);
}
const delayMs = Number(delayArg);

const deadline = setTimeout(() => {
  process.stderr.write(`send_all_kinds: no result after ${DEADLINE_MS} ms, giving up\n`);
  process.exit(1);
}, DEADLINE_MS);
deadline.unref();

// The default logger writes to ~/logs/rocketmq; keep everything on stderr instead.
const log = level => (...args) => process.stderr.write(`[node-client ${level}] ${format(...args)}\n`);
const logger = { info: log('INFO'), warn: log('WARN'), error: log('ERROR'), debug: () => {} };

// Required by beginTransaction(); only called if the broker checks the half message before the
// commit arrives (it should not: the commit follows the send at once).
const checker = {
  async check(messageView) {
    process.stderr.write(`send_all_kinds: transaction check for ${messageView.messageId}\n`);
    return TransactionResolution.COMMIT;
  },
};

function emit(kind, receipt, extra = {}) {
  if (!receipt || !receipt.messageId) {
    throw new Error(`${kind}: the send receipt carries no message id`);
  }
  process.stdout.write(`${JSON.stringify({ kind, messageId: receipt.messageId, ...extra })}\n`);
}

async function main() {
  const producer = new Producer({
    endpoints: endpoint,
    namespace: '',
    topics: [ topic ],
    requestTimeout: REQUEST_TIMEOUT_MS,
    checker,
    logger,
  });
  await producer.startup();
  try {
    const normal = await producer.send({
      topic,
      tag: 'TagNormal',
      keys: [ 'node-normal-key-1', 'node-normal-key-2' ],
      properties: new Map([ [ 'origin', 'node' ] ]),
      body: Buffer.from('node normal message'),
    });
    emit('NORMAL', normal, { offset: normal.offset });

    const fifo = await producer.send({
      topic,
      tag: 'TagFifo',
      keys: [ 'node-fifo-key' ],
      messageGroup: 'node-group-1',
      body: Buffer.from('node fifo message'),
    });
    emit('FIFO', fifo, { offset: fifo.offset });

    const deliveryTimestamp = new Date(Date.now() + delayMs);
    const delayed = await producer.send({
      topic,
      tag: 'TagDelay',
      keys: [ 'node-delay-key' ],
      deliveryTimestamp,
      body: Buffer.from('node delay message'),
    });
    emit('DELAY', delayed, { deliveryTimestampMs: deliveryTimestamp.getTime() });

    const transaction = producer.beginTransaction();
    const half = await producer.send({
      topic,
      tag: 'TagTransaction',
      keys: [ 'node-transaction-key' ],
      body: Buffer.from('node transaction message'),
    }, transaction);
    if (!half.transactionId) {
      throw new Error('TRANSACTION: the send receipt carries no transaction id');
    }
    await transaction.commit();
    emit('TRANSACTION', half, { transactionId: half.transactionId });
  } finally {
    await producer.shutdown();
  }
}

try {
  await main();
  process.exit(0);
} catch (err) {
  process.stderr.write(`send_all_kinds: FAILED: ${err && err.stack ? err.stack : err}\n`);
  if (err && err.cause) {
    process.stderr.write(`caused by: ${err.cause.stack ?? err.cause}\n`);
  }
  process.exit(1);
}
