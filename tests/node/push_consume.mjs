// Consumes with the official Node client's PushConsumer (rocketmq-client-nodejs, pinned in
// package.json) from the endpoint given first, subscribed to TOPIC (filter `*`) as consumer
// group GROUP, and prints one JSON line per message its listener consumed, in the order it
// consumed them:
//   {"messageId": "...", "messageGroup": "...", "body": "...", "deliveryAttempt": 1}
// Every message is consumed successfully. Once COUNT were consumed it goes on for --listen-ms
// more (duplicates would show up there), then shuts down and exits 0. Exit 1 on any failure, or
// when COUNT did not come before the hard deadline (the client waits forever for a Settings
// reply, spec section 3.2). The client's own log goes to stderr.
//
// Usage: node push_consume.mjs HOST:PORT TOPIC GROUP COUNT [--listen-ms=N] [--deadline-ms=N]

import { format } from 'node:util';
import client from 'rocketmq-client-nodejs';

const { PushConsumer, ConsumeResult } = client;

const REQUEST_TIMEOUT_MS = 5_000;

const positional = [];
const options = { listenMs: 0, deadlineMs: 60_000 };
for (const arg of process.argv.slice(2)) {
  const [ name, value ] = arg.split('=', 2);
  if (name === '--listen-ms') {
    options.listenMs = Number(value);
  } else if (name === '--deadline-ms') {
    options.deadlineMs = Number(value);
  } else {
    positional.push(arg);
  }
}
if (positional.length !== 4) {
  process.stderr.write('usage: node push_consume.mjs HOST:PORT TOPIC GROUP COUNT ' +
    '[--listen-ms=N] [--deadline-ms=N]\n');
  process.exit(2);
}
const [ endpoint, topic, group, countArg ] = positional;
const count = Number(countArg);
let consumed = 0;

const deadline = setTimeout(() => {
  process.stderr.write(`push_consume: FAILED: consumed ${consumed} of ${count} messages ` +
    `within the deadline of ${options.deadlineMs} ms\n`);
  process.exit(1);
}, options.deadlineMs);
deadline.unref();

const log = level => (...a) => process.stderr.write(`[node-client ${level}] ${format(...a)}\n`);
const logger = { info: log('INFO'), warn: log('WARN'), error: log('ERROR'), debug: () => {} };

let allConsumed;
const done = new Promise(resolve => { allConsumed = resolve; });

const consumer = new PushConsumer({
  endpoints: endpoint,
  namespace: '',
  consumerGroup: group,
  subscriptions: new Map([ [ topic, '*' ] ]),
  requestTimeout: REQUEST_TIMEOUT_MS,
  logger,
  messageListener: {
    async consume(m) {
      consumed += 1;
      process.stdout.write(`${JSON.stringify({
        messageId: m.messageId,
        messageGroup: m.messageGroup ?? null,
        body: m.body.toString('utf8'),
        deliveryAttempt: m.deliveryAttempt,
      })}\n`);
      if (consumed >= count) {
        allConsumed();
      }
      return ConsumeResult.SUCCESS;
    },
  },
});

try {
  await consumer.startup();
  if (count > 0) {
    await done;
  }
  await new Promise(resolve => setTimeout(resolve, options.listenMs));
  await consumer.shutdown();
  process.exit(0);
} catch (err) {
  process.stderr.write(`push_consume: FAILED: ${err && err.stack ? err.stack : err}\n`);
  process.exit(1);
}
