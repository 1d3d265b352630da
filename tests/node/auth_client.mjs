// The official Node client (rocketmq-client-nodejs) as a user of a broker with --auth: sends or
// receives under an access key, a secret key and a namespace, and prints one JSON line per
// message on stdout:
//   send:    {"messageId": "..."}
//   receive: {"messageId": "...", "topic": "...", "body": "..."} (each acked), then
//            {"extra": N}: what one more receive brought (0: nothing beyond COUNT was stored)
// A refusal is an answer, not a failure: {"error": {"code": N, "message": "..."}}, exit 0.
// Exit 1 on anything else (or the deadline), its error on stderr; the client's log to stderr.
//
// Usage: node auth_client.mjs HOST:PORT send|receive TOPIC COUNT --ak=AK --sk=SK
//        [--namespace=NS] [--group=G] [--deadline-ms=N]

import { format } from 'node:util';
import client from 'rocketmq-client-nodejs';

const { Producer, SimpleConsumer } = client;
const REQUEST_TIMEOUT_MS = 5_000;
const INVISIBLE_MS = 10_000;
const AWAIT_MS = 2_000;

const positional = [];
const options = { namespace: '', group: '', deadlineMs: 60_000 };
for (const arg of process.argv.slice(2)) {
  const [ name, value ] = arg.split('=', 2);
  const key = { '--ak': 'ak', '--sk': 'sk', '--namespace': 'namespace', '--group': 'group',
    '--deadline-ms': 'deadlineMs' }[name];
  if (key) {
    options[key] = key === 'deadlineMs' ? Number(value) : value;
  } else {
    positional.push(arg);
  }
}
if (positional.length !== 4 || !options.ak || !options.sk) {
  process.stderr.write('usage: node auth_client.mjs HOST:PORT send|receive TOPIC COUNT ' +
    '--ak=AK --sk=SK [--namespace=NS] [--group=G] [--deadline-ms=N]\n');
  process.exit(2);
}
const [ endpoint, mode, topic, countArg ] = positional;
const count = Number(countArg);

const deadline = setTimeout(() => {
  process.stderr.write(`auth_client: FAILED: not done within ${options.deadlineMs} ms\n`);
  process.exit(1);
}, options.deadlineMs);
deadline.unref();

const log = level => (...a) => process.stderr.write(`[node-client ${level}] ${format(...a)}\n`);
const logger = { info: log('INFO'), warn: log('WARN'), error: log('ERROR'), debug: () => {} };
const common = {
  endpoints: endpoint,
  namespace: options.namespace,
  sessionCredentials: { accessKey: options.ak, accessSecret: options.sk },
  requestTimeout: REQUEST_TIMEOUT_MS,
  logger,
};
const print = line => process.stdout.write(`${JSON.stringify(line)}\n`);

async function send() {
  const producer = new Producer({ ...common, topics: [ topic ] });
  await producer.startup();
  try {
    for (let i = 0; i < count; i++) {
      const receipt = await producer.send({ topic, body: Buffer.from(`node ${i}`) });
      print({ messageId: receipt.messageId });
    }
  } finally {
    await producer.shutdown();
  }
}

async function receive() {
  const consumer = new SimpleConsumer({
    ...common, consumerGroup: options.group, subscriptions: new Map([ [ topic, '*' ] ]),
    awaitDuration: AWAIT_MS,
  });
  await consumer.startup();
  try {
    let received = 0;
    while (received < count) {
      for (const m of await consumer.receive(32, INVISIBLE_MS)) {
        await consumer.ack(m);
        received += 1;
        print({ messageId: m.messageId, topic: m.topic, body: m.body.toString('utf8') });
      }
    }
    print({ extra: (await consumer.receive(32, INVISIBLE_MS)).length });
  } finally {
    await consumer.shutdown();
  }
}

try {
  await (mode === 'send' ? send() : receive());
  process.exit(0);
} catch (err) {
  // A refused start-up wraps the broker's answer in causes: the first with a code is it.
  for (let e = err; e; e = e.cause) {
    if (typeof e.code === 'number') {
      print({ error: { code: e.code, message: String(e.message) } });
      process.exit(0);
    }
  }
  process.stderr.write(`auth_client: FAILED: ${err && err.stack ? err.stack : err}\n`);
  process.exit(1);
}
