// Leaves a transaction for the server to resolve: with the official Node client's Producer
// (rocketmq-client-nodejs, pinned in package.json) it sends one half message to TOPIC on the
// endpoint given first, and never commits nor rolls it back. The broker, once the transaction
// outlives its timeout, asks this producer's checker over the Telemetry stream
// (RecoverOrphanedTransactionCommand); the checker answers RESOLUTION (COMMIT or ROLLBACK).
// It prints a JSON line for the half message and one for the check:
//   {"half": "<message id>", "transactionId": "..."}
//   {"checked": "<message id>", "resolution": "COMMIT"}
// then waits a moment for the client to send its answer (EndTransaction), shuts down and exits 0.
// Exit 1 on any failure, or with no check before the hard deadline.
//
// Usage: node orphan_transaction.mjs HOST:PORT TOPIC [COMMIT|ROLLBACK] [--deadline-ms=N]

import { format } from 'node:util';
import client from 'rocketmq-client-nodejs';
import definition from 'rocketmq-client-nodejs/proto/apache/rocketmq/v2/definition_pb.js';

const { Producer } = client;
const { TransactionResolution } = definition;

const REQUEST_TIMEOUT_MS = 5_000;
// What the client needs to send the checker's answer once the checker has returned.
const ANSWER_WAIT_MS = 2_000;

const positional = [];
let deadlineMs = 60_000;
for (const arg of process.argv.slice(2)) {
  const [ name, value ] = arg.split('=', 2);
  if (name === '--deadline-ms') {
    deadlineMs = Number(value);
  } else {
    positional.push(arg);
  }
}
const [ endpoint, topic, resolutionName = 'COMMIT' ] = positional;
if (!endpoint || !topic || !(resolutionName in TransactionResolution)) {
  process.stderr.write('usage: node orphan_transaction.mjs HOST:PORT TOPIC [COMMIT|ROLLBACK] ' +
    '[--deadline-ms=N]\n');
  process.exit(2);
}

const deadline = setTimeout(() => {
  process.stderr.write(`orphan_transaction: FAILED: no transaction check within ${deadlineMs} ms\n`);
  process.exit(1);
}, deadlineMs);
deadline.unref();

const log = level => (...a) => process.stderr.write(`[node-client ${level}] ${format(...a)}\n`);
const logger = { info: log('INFO'), warn: log('WARN'), error: log('ERROR'), debug: () => {} };

let checked;
const wasChecked = new Promise(resolve => { checked = resolve; });

const producer = new Producer({
  endpoints: endpoint,
  namespace: '',
  topics: [ topic ],
  requestTimeout: REQUEST_TIMEOUT_MS,
  logger,
  checker: {
    async check(messageView) {
      process.stdout.write(`${JSON.stringify({
        checked: messageView.messageId, resolution: resolutionName,
      })}\n`);
      checked();
      return TransactionResolution[resolutionName];
    },
  },
});

try {
  await producer.startup();
  const transaction = producer.beginTransaction();
  const half = await producer.send({
    topic,
    tag: 'TagOrphan',
    keys: [ 'node-orphan-key' ],
    body: Buffer.from('node orphan transaction message'),
  }, transaction);
  process.stdout.write(`${JSON.stringify({
    half: half.messageId, transactionId: half.transactionId,
  })}\n`);
  await wasChecked;
  await new Promise(resolve => setTimeout(resolve, ANSWER_WAIT_MS));
  await producer.shutdown();
  process.exit(0);
} catch (err) {
  process.stderr.write(`orphan_transaction: FAILED: ${err && err.stack ? err.stack : err}\n`);
  process.exit(1);
}
