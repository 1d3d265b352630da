// One Send to rocketbox.v1 over TLS from a plain gRPC client (@grpc/grpc-js, the sidecar's API
// loaded from proto/rocketbox/v1/sidecar.proto by @grpc/proto-loader), trusting the CA file
// given, presenting a client certificate and key when given (mTLS), and the bearer token of the
// environment variable ROCKETBOX_SIDECAR_TOKEN when set. Prints one JSON line on stdout:
//   {"messageId": "...", "outcome": "stored" | "spooled" | "rejected"}   the call answered
//   {"error": {"code": N, "codeName": "...", "details": "..."}}          the call failed
// Exit 0 either way (judging is the caller's), 1 past the deadline, 2 on bad usage.
//
// Usage: node send_tls.mjs HOST:PORT TOPIC CA_FILE [CERT_FILE KEY_FILE]

import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import grpc from '@grpc/grpc-js';
import protoLoader from '@grpc/proto-loader';

const DEADLINE_MS = 60_000;
const CALL_TIMEOUT_MS = 30_000;
const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

const [ address, topic, caFile, certFile, keyFile ] = process.argv.slice(2);
if (!address || !topic || !caFile || (certFile && !keyFile)) {
  process.stderr.write('usage: node send_tls.mjs HOST:PORT TOPIC CA_FILE [CERT_FILE KEY_FILE]\n');
  process.exit(2);
}
const deadline = setTimeout(() => {
  process.stderr.write(`send_tls: not done after ${DEADLINE_MS} ms, giving up\n`);
  process.exit(1);
}, DEADLINE_MS);
deadline.unref();

const sidecarPackage = protoLoader.loadSync('rocketbox/v1/sidecar.proto', {
  keepCase: true, longs: String, enums: String, defaults: true, oneofs: true,
  includeDirs: [ path.join(REPO_ROOT, 'proto') ],
});
const { SidecarService } = grpc.loadPackageDefinition(sidecarPackage).rocketbox.v1;
const credentials = grpc.credentials.createSsl(
  fs.readFileSync(caFile),
  keyFile ? fs.readFileSync(keyFile) : null,
  certFile ? fs.readFileSync(certFile) : null,
);
const client = new SidecarService(address, credentials);
const metadata = new grpc.Metadata();
if (process.env.ROCKETBOX_SIDECAR_TOKEN) {
  metadata.set('authorization', `Bearer ${process.env.ROCKETBOX_SIDECAR_TOKEN}`);
}
const codeNames = Object.fromEntries(Object.entries(grpc.status).map(([ name, code ]) => [ code, name ]));
const request = { message: { topic, body: Buffer.from('node over TLS') } };

client.Send(request, metadata, { deadline: new Date(Date.now() + CALL_TIMEOUT_MS) }, (err, response) => {
  const line = err
    ? { error: { code: err.code, codeName: codeNames[err.code], details: err.details } }
    : { messageId: response.result.message_id, outcome: response.result.outcome };
  process.stdout.write(`${JSON.stringify(line)}\n`);
  client.close();
  process.exit(0);
});
