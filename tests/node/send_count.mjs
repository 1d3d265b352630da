// Sends COUNT messages with the official Node client's Producer (rocketmq-client-nodejs, pinned
// in package.json) to TOPIC on the endpoint given first, one at a time, and prints one JSON line
// per send receipt on stdout:
//   {"messageId": "...", "offset": N, "body": "..."}
// With --group=G the messages are FIFO messages of message group G; with --ssl the client speaks
// TLS (sslEnabled: it trusts gRPC's default roots, GRPC_DEFAULT_SSL_ROOTS_FILE_PATH for a private
// CA). Exit 0 when all were sent,
// 1 on the first failure (its error on stderr). The client's own log goes to stderr.
//
// Usage: node send_count.mjs HOST:PORT TOPIC COUNT [--group=G] [--deadline-ms=N] [--ssl]

import { format } from 'node:util';
import client from 'rocketmq-client-nodejs';

const { Producer } = client;

const REQUEST_TIMEOUT_MS = 5_000;

const positional = [];
const options = { group: undefined, deadlineMs: 60_000, ssl: false };
for (const arg of process.argv.slice(2)) {
  const [ name, value ] = arg.split('=', 2);
  if (name === '--group') {
    options.group = value;
  } else if (name === '--ssl') {
    options.ssl = true;
  } else if (name === '--deadline-ms') {
    options.deadlineMs = Number(value);
  } else {
    positional.push(arg);
  }
}
if (positional.length !== 3) {
  process.stderr.write('usage: node send_count.mjs HOST:PORT TOPIC COUNT [--group=G] ' +
    '[--deadline-ms=N] [--ssl]\n');
  process.exit(2);
}
const [ endpoint, topic, countArg ] = positional;
const count = Number(countArg);

const deadline = setTimeout(() => {
  process.stderr.write(`send_count: FAILED: not done within ${options.deadlineMs} ms\n`);
  process.exit(1);
}, options.deadlineMs);
deadline.unref();

const log = level => (...a) => process.stderr.write(`[node-client ${level}] ${format(...a)}\n`);
const logger = { info: log('INFO'), warn: log('WARN'), error: log('ERROR'), debug: () => {} };

const producer = new Producer({
  endpoints: endpoint, namespace: '', topics: [ topic ], requestTimeout: REQUEST_TIMEOUT_MS, logger,
  sslEnabled: options.ssl,
});

try {
  await producer.startup();
  for (let i = 0; i < count; i++) {
    const body = `node message ${i}`;
    const receipt = await producer.send({
      topic, body: Buffer.from(body), ...(options.group ? { messageGroup: options.group } : {}),
    });
    process.stdout.write(`${JSON.stringify({
      messageId: receipt.messageId, offset: Number(receipt.offset), body,
    })}\n`);
  }
  await producer.shutdown();
  process.exit(0);
} catch (err) {
  process.stderr.write(`send_count: FAILED: ${err && err.stack ? err.stack : err}\n`);
  process.exit(1);
}
