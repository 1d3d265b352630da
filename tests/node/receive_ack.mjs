// Receives messages with the official Node client's SimpleConsumer (rocketmq-client-nodejs,
// pinned in package.json) from the broker whose endpoint is the first argument, subscribed to
// TOPIC (filter `*`) as consumer group GROUP, and prints one JSON line per delivery on stdout:
//   {"messageId": "...", "body": "...", "deliveryAttempt": 1, "tag": "...", "keys": [...],
//    "topic": "...", "corrupted": false}
// Each delivery is acked before its line is printed (a printed line is an acked message), unless
// --no-ack is given (then it is printed as received and left to come back after its invisible
// time).
//
// It receives until COUNT deliveries came, then goes on receiving for --listen-ms more (to catch
// deliveries that should not come, e.g. duplicates; with COUNT 0 this is how long it listens for
// nothing), then exits 0. Exit 1 with the error on stderr on any failure, or when COUNT did not
// come before the hard deadline (the client would otherwise wait forever, e.g. for a Settings
// reply, spec section 3.2). The client's own log goes to stderr.
//
// Usage: node receive_ack.mjs HOST:PORT TOPIC GROUP COUNT [--no-ack] [--invisible-ms=N]
//          [--await-ms=N] [--listen-ms=N] [--batch=N] [--deadline-ms=N]
//   --invisible-ms  receive(..., invisibleDuration), ms (default 10000, the proxy's minimum)
//   --await-ms      the consumer's awaitDuration, the long-polling time of a receive, ms
//                   (default 5000)
//   --listen-ms     how long to keep receiving once COUNT came, ms (default 0)
//   --batch         receive(maxMessageNum, ...) (default 32, the broker's maximum)
//   --deadline-ms   hard deadline for the whole run, ms (default 60000)

import { format } from 'node:util';
import client from 'rocketmq-client-nodejs';

const { SimpleConsumer } = client;

const REQUEST_TIMEOUT_MS = 5_000;

function usage(message) {
  process.stderr.write(`receive_ack: ${message}\n`);
  process.stderr.write('usage: node receive_ack.mjs HOST:PORT TOPIC GROUP COUNT [--no-ack] ' +
    '[--invisible-ms=N] [--await-ms=N] [--listen-ms=N] [--batch=N] [--deadline-ms=N]\n');
  process.exit(2);
}

function parseArgs(argv) {
  const positional = [];
  const options = {
    ack: true, invisibleMs: 10_000, awaitMs: 5_000, listenMs: 0, batch: 32, deadlineMs: 60_000,
  };
  const numeric = {
    '--invisible-ms': 'invisibleMs',
    '--await-ms': 'awaitMs',
    '--listen-ms': 'listenMs',
    '--batch': 'batch',
    '--deadline-ms': 'deadlineMs',
  };
  for (const arg of argv) {
    if (arg === '--no-ack') {
      options.ack = false;
    } else if (arg.startsWith('--')) {
      const [ name, value ] = arg.split('=', 2);
      const key = numeric[name];
      const number = Number(value);
      if (!key || value === undefined || !Number.isInteger(number) || number < 0) {
        usage(`bad option ${arg}`);
      }
      options[key] = number;
    } else {
      positional.push(arg);
    }
  }
  if (positional.length !== 4) {
    usage('expected HOST:PORT TOPIC GROUP COUNT');
  }
  const [ endpoint, topic, group, countArg ] = positional;
  const count = Number(countArg);
  if (!Number.isInteger(count) || count < 0) {
    usage(`bad COUNT ${countArg}`);
  }
  return { endpoint, topic, group, count, ...options };
}

const args = parseArgs(process.argv.slice(2));
let received = 0;

const deadline = setTimeout(() => {
  process.stderr.write(`receive_ack: FAILED: received ${received} of ${args.count} messages ` +
    `within the deadline of ${args.deadlineMs} ms\n`);
  process.exit(1);
}, args.deadlineMs);
deadline.unref();

// The default logger writes to ~/logs/rocketmq; keep everything on stderr instead.
const log = level => (...a) => process.stderr.write(`[node-client ${level}] ${format(...a)}\n`);
const logger = { info: log('INFO'), warn: log('WARN'), error: log('ERROR'), debug: () => {} };

async function receiveOnce(consumer) {
  const messages = await consumer.receive(args.batch, args.invisibleMs);
  for (const m of messages) {
    if (args.ack) {
      await consumer.ack(m);
    }
    received += 1;
    process.stdout.write(`${JSON.stringify({
      messageId: m.messageId,
      body: m.body.toString('utf8'),
      deliveryAttempt: m.deliveryAttempt,
      tag: m.tag,
      keys: m.keys,
      topic: m.topic,
      corrupted: Boolean(m.corrupted),
    })}\n`);
  }
}

async function main() {
  const consumer = new SimpleConsumer({
    endpoints: args.endpoint,
    namespace: '',
    consumerGroup: args.group,
    subscriptions: new Map([ [ args.topic, '*' ] ]),
    awaitDuration: args.awaitMs,
    requestTimeout: REQUEST_TIMEOUT_MS,
    logger,
  });
  await consumer.startup();
  try {
    while (received < args.count) {
      await receiveOnce(consumer);
    }
    const listenEnd = Date.now() + args.listenMs;
    while (Date.now() < listenEnd) {
      await receiveOnce(consumer);
    }
  } finally {
    await consumer.shutdown();
  }
}

try {
  await main();
  process.exit(0);
} catch (err) {
  process.stderr.write(`receive_ack: FAILED: ${err && err.stack ? err.stack : err}\n`);
  if (err && err.cause) {
    process.stderr.write(`caused by: ${err.cause.stack ?? err.cause}\n`);
  }
  process.exit(1);
}
