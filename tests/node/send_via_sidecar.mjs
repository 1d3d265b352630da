// An application in another language than the sidecar's: a plain gRPC client (@grpc/grpc-js,
// with proto/rocketbox/v1/sidecar.proto loaded at run time by @grpc/proto-loader; both pinned in
// package.json) calls every method of rocketbox.v1.SidecarService on the sidecar whose address
// is the first argument:
//   send       Send of one message with a tag, keys and user properties
//   appId      Send of one message carrying the app's own message_id (APP_MESSAGE_ID)
//   bad        Send of a message with an empty body, which the sidecar must refuse
//   batch      SendBatch of 3 messages
//   stream     SendStream of 5 messages, with request ids the sidecar must echo (two of them
//              beyond 2^53, to show uint64 ids go through exactly)
// and prints what it got as one JSON object on stdout:
//   {"send": RESULT, "appId": RESULT, "bad": ERROR, "batch": [RESULT...],
//    "stream": [{"requestId": "...", ...RESULT}...]}
// where RESULT is {"messageId", "outcome" ("stored" | "spooled" | "rejected"), "stored",
// "spooled", "rejected"} (the oneof's members as the sidecar sent them, int64 as strings), and
// ERROR is the bad Send's status: {"code", "codeName", "details", "fieldViolations"} (the
// google.rpc.BadRequest in the status details), or {"unexpectedSuccess": RESULT}.
//
// Bodies say which request they were ("node-sidecar batch 1", "node-sidecar stream 3", ...), so
// that the caller can match each result with what the broker stored. Judging the outcomes is the
// caller's job (tests/node/test_node_sidecar.py); this script exits 1, with the error on stderr,
// only when a call fails in a way no outcome explains (any error but the bad Send's, a stream
// that ends early, the hard deadline), and 2 on bad usage.
//
// Usage: node send_via_sidecar.mjs HOST:PORT TOPIC APP_MESSAGE_ID

import path from 'node:path';
import { fileURLToPath } from 'node:url';
import grpc from '@grpc/grpc-js';
import protoLoader from '@grpc/proto-loader';

const DEADLINE_MS = 60_000;
const CALL_TIMEOUT_MS = 30_000;
const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const PROTO_ROOT = path.join(REPO_ROOT, 'proto');
const BATCH_SIZE = 3;
// Echoed by the sidecar as sent: uint64, so the last two are beyond a JavaScript number's
// exact range and only survive as strings (longs: String below).
const STREAM_REQUEST_IDS = [ '1', '2', '3', '9007199254740993', '18446744073709551615' ];

const [ address, topic, appMessageId ] = process.argv.slice(2);
if (!address || !topic || !appMessageId) {
  process.stderr.write('usage: node send_via_sidecar.mjs HOST:PORT TOPIC APP_MESSAGE_ID\n');
  process.exit(2);
}

const deadline = setTimeout(() => {
  process.stderr.write(`send_via_sidecar: not done after ${DEADLINE_MS} ms, giving up\n`);
  process.exit(1);
}, DEADLINE_MS);
deadline.unref();

const LOADER_OPTIONS = {
  keepCase: true, // field names as in the .proto: message_id, user_properties, request_id
  longs: String, // int64 / uint64 as decimal strings, exact
  enums: String, // SpoolCause by name
  defaults: true,
  oneofs: true, // SendResult.outcome names the member that is set
};

// The sidecar's API, from its .proto; google/protobuf/{timestamp,duration}.proto come with
// proto-loader (protobufjs's copies of the well-known types).
const sidecarPackage = protoLoader.loadSync('rocketbox/v1/sidecar.proto', {
  ...LOADER_OPTIONS,
  includeDirs: [ PROTO_ROOT ],
});
const { SidecarService } = grpc.loadPackageDefinition(sidecarPackage).rocketbox.v1;

// A rejected Send's status details (trailer grpc-status-details-bin) are a google.rpc.Status
// whose details hold a google.rpc.BadRequest. proto-loader ships only google/protobuf, so the
// few fields needed are declared here, wire-compatible with google/rpc/status.proto and
// error_details.proto (Detail is google.protobuf.Any). A service declared around them gives the
// decoders, through proto-loader's public API.
const rpcStatusPackage = protoLoader.fromJSON({
  nested: {
    rpcstatus: {
      nested: {
        Status: {
          fields: {
            code: { type: 'int32', id: 1 },
            message: { type: 'string', id: 2 },
            details: { rule: 'repeated', type: 'Detail', id: 3 },
          },
        },
        Detail: {
          fields: { type_url: { type: 'string', id: 1 }, value: { type: 'bytes', id: 2 } },
        },
        BadRequest: {
          fields: { field_violations: { rule: 'repeated', type: 'FieldViolation', id: 1 } },
        },
        FieldViolation: {
          fields: { field: { type: 'string', id: 1 }, description: { type: 'string', id: 2 } },
        },
        Decoders: {
          methods: {
            Status: { requestType: 'Status', responseType: 'Status' },
            BadRequest: { requestType: 'BadRequest', responseType: 'BadRequest' },
          },
        },
      },
    },
  },
}, LOADER_OPTIONS);
const decodeStatus = rpcStatusPackage['rpcstatus.Decoders'].Status.requestDeserialize;
const decodeBadRequest = rpcStatusPackage['rpcstatus.Decoders'].BadRequest.requestDeserialize;
const BAD_REQUEST_TYPE_URL = 'type.googleapis.com/google.rpc.BadRequest';

const codeNames = Object.fromEntries(Object.entries(grpc.status).map(([ name, code ]) => [ code, name ]));

function callOptions() {
  return { deadline: new Date(Date.now() + CALL_TIMEOUT_MS) };
}

function body(text) {
  return Buffer.from(`node-sidecar ${text}`);
}

function result(r) {
  if (!r) {
    throw new Error('an answer without a result');
  }
  return {
    messageId: r.message_id,
    outcome: r.outcome ?? null,
    stored: r.stored ?? null,
    spooled: r.spooled ?? null,
    rejected: r.rejected ? { ...r.rejected, retry_after: r.rejected.retry_after ?? null } : null,
  };
}

function unary(client, method, request) {
  return new Promise((resolve, reject) => {
    client[method](request, callOptions(), (err, response) => (err ? reject(err) : resolve(response)));
  });
}

function fieldViolations(err) {
  const violations = [];
  for (const raw of err.metadata?.get('grpc-status-details-bin') ?? []) {
    for (const detail of decodeStatus(raw).details) {
      if (detail.type_url === BAD_REQUEST_TYPE_URL) {
        violations.push(...decodeBadRequest(detail.value).field_violations);
      }
    }
  }
  return violations;
}

async function sendBad(client) {
  try {
    const response = await unary(client, 'Send', { message: { topic, body: Buffer.alloc(0) } });
    return { unexpectedSuccess: result(response.result) };
  } catch (err) {
    if (typeof err.code !== 'number') {
      throw err;
    }
    return {
      code: err.code,
      codeName: codeNames[err.code],
      details: err.details,
      fieldViolations: fieldViolations(err),
    };
  }
}

function sendStream(client, requests) {
  return new Promise((resolve, reject) => {
    const answers = [];
    const call = client.SendStream(callOptions());
    call.on('data', response => answers.push({ requestId: response.request_id, ...result(response.result) }));
    call.on('error', reject);
    call.on('end', () => {
      if (answers.length !== requests.length) {
        reject(new Error(`SendStream ended after ${answers.length} of ${requests.length} results`));
      } else {
        resolve(answers);
      }
    });
    for (const request of requests) {
      call.write(request);
    }
    call.end();
  });
}

async function main() {
  const client = new SidecarService(address, grpc.credentials.createInsecure());
  try {
    const report = {};
    report.send = result((await unary(client, 'Send', {
      message: {
        topic,
        body: body('send'),
        tag: 'TagNodeSidecar',
        keys: [ 'node-sidecar-key-1', 'node-sidecar-key-2' ],
        user_properties: { origin: 'node', via: 'sidecar' },
      },
    })).result);

    report.appId = result((await unary(client, 'Send', {
      message: { topic, body: body('app id'), message_id: appMessageId },
    })).result);

    report.bad = await sendBad(client);

    const batch = Array.from({ length: BATCH_SIZE }, (_, i) => ({
      topic,
      body: body(`batch ${i}`),
      keys: [ `node-sidecar-batch-${i}` ],
    }));
    report.batch = (await unary(client, 'SendBatch', { messages: batch })).results.map(result);

    report.stream = await sendStream(client, STREAM_REQUEST_IDS.map(requestId => ({
      request_id: requestId,
      message: { topic, body: body(`stream ${requestId}`) },
    })));

    process.stdout.write(`${JSON.stringify(report)}\n`);
  } finally {
    client.close();
  }
}

try {
  await main();
  process.exit(0);
} catch (err) {
  process.stderr.write(`send_via_sidecar: FAILED: ${err && err.stack ? err.stack : err}\n`);
  if (err && err.code !== undefined) {
    process.stderr.write(`gRPC status ${codeNames[err.code] ?? err.code}: ${err.details}\n`);
  }
  process.exit(1);
}
