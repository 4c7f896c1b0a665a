#!/usr/bin/env node
// A local S3 for the blob store tests: s3rver (pinned in package.json) on 127.0.0.1, files in a
// directory, one bucket created at start. Prints "listening <port>" once it answers, so the
// caller can pass port 0 and read the chosen port.
//
// s3rver 3.7.1 checks that a SigV4 request names a known access key but never checks the
// signature itself ("Signature version 4 calculation is unimplemented" in its authentication
// middleware). A store that signs wrongly would pass against it and fail against S3, so this
// launcher verifies every SigV4 Authorization header first, per the AWS specification, with
// s3rver's single account S3RVER/S3RVER. Anonymous requests are refused too.
//
// s3rver also streams a PUT body straight into the object and keeps whatever arrived when the
// client goes away mid-body; S3 stores an object (or a part) only once its whole
// Content-Length arrived. So PUT bodies are spooled to a file first and handed to s3rver only
// when complete: a cut upload leaves nothing behind, as on S3.
//
// It also answers AbortMultipartUpload (DELETE ?uploadId=...), which s3rver refuses with 405:
// the parts of the upload are removed, as S3 does.
//
// usage: node serve.js --dir DIR --bucket NAME [--port N]
'use strict';

const crypto = require('crypto');
const fs = require('fs');
const path = require('path');
const S3rver = require('s3rver');

const ACCESS_KEY = 'S3RVER';
const SECRET_KEY = 'S3RVER';

function arg(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  if (i >= 0 && i + 1 < process.argv.length) return process.argv[i + 1];
  if (fallback === undefined) {
    console.error(`serve.js: --${name} is required`);
    process.exit(2);
  }
  return fallback;
}

const hmac = (key, text) => crypto.createHmac('sha256', key).update(text).digest();
const sha256Hex = text => crypto.createHash('sha256').update(text).digest('hex');

function errorBody(code, message) {
  return `<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>${code}</Code>` +
    `<Message>${message}</Message></Error>`;
}

// The canonical query string: each parameter as sent (already URI-encoded by the client),
// "name" written as "name=", sorted by name then value.
function canonicalQuery(rawQuery) {
  if (!rawQuery) return '';
  return rawQuery
    .split('&')
    .filter(p => p.length > 0)
    .map(p => (p.includes('=') ? p.split(/=(.*)/s).slice(0, 2) : [p, '']))
    .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0))
    .map(([k, v]) => `${k}=${v}`)
    .join('&');
}

// Returns null when the request is signed correctly, else [code, message].
function checkSignature(req) {
  const auth = req.headers['authorization'];
  if (!auth) return ['AccessDenied', 'Anonymous requests are not allowed'];
  const match = /^AWS4-HMAC-SHA256 Credential=([^,]+),\s*SignedHeaders=([^,]+),\s*Signature=([0-9a-f]+)$/.exec(auth);
  if (!match) return ['AuthorizationHeaderMalformed', 'Not a SigV4 Authorization header'];
  const [, credential, signedHeaders, signature] = match;
  const [accessKey, date, region, service, terminator] = credential.split('/');
  if (accessKey !== ACCESS_KEY) {
    return ['InvalidAccessKeyId', 'The AWS Access Key Id you provided does not exist in our records.'];
  }
  if (service !== 's3' || terminator !== 'aws4_request') {
    return ['AuthorizationHeaderMalformed', `Bad credential scope ${credential}`];
  }
  const amzDate = req.headers['x-amz-date'];
  const payloadHash = req.headers['x-amz-content-sha256'];
  if (!amzDate || !payloadHash) {
    return ['InvalidRequest', 'x-amz-date and x-amz-content-sha256 are required'];
  }
  const names = signedHeaders.split(';');
  if (!names.includes('host') || !names.includes('x-amz-date')) {
    return ['AccessDenied', 'host and x-amz-date must be signed'];
  }
  const headers = names.map(name => {
    const value = req.headers[name];
    return `${name}:${value === undefined ? '' : String(value).trim().replace(/\s+/g, ' ')}\n`;
  });
  const [path, query] = req.url.split(/\?(.*)/s);
  const canonicalRequest = [req.method, path, canonicalQuery(query), headers.join(''),
    signedHeaders, payloadHash].join('\n');
  const scope = `${date}/${region}/${service}/${terminator}`;
  const stringToSign = ['AWS4-HMAC-SHA256', amzDate, scope, sha256Hex(canonicalRequest)].join('\n');
  let key = hmac(`AWS4${SECRET_KEY}`, date);
  key = hmac(key, region);
  key = hmac(key, service);
  key = hmac(key, terminator);
  const expected = hmac(key, stringToSign).toString('hex');
  if (expected !== signature) {
    return ['SignatureDoesNotMatch',
      'The request signature we calculated does not match the signature you provided. ' +
      'Check your key and signing method.'];
  }
  return null;
}

// Spools the request body into `file`; resolves true when exactly Content-Length bytes came.
function spool(req, file) {
  const expected = Number(req.headers['content-length']);
  return new Promise(resolve => {
    let received = 0;
    let settled = false;
    const out = fs.createWriteStream(file);
    const finish = complete => {
      if (settled) return;
      settled = true;
      // Ended, not destroyed: writes still queued would throw on a destroyed stream.
      out.end(() => resolve(complete));
    };
    out.on('error', () => finish(false));
    req.on('data', chunk => {
      received += chunk.length;
      out.write(chunk);
    });
    req.on('end', () => finish(received === expected));
    req.on('aborted', () => finish(false));
    req.on('error', () => finish(false));
    req.on('close', () => finish(received === expected && req.complete));
  });
}

// A readable of the spooled body that still looks like the request to Koa and s3rver.
function spooledRequest(req, file) {
  const body = fs.createReadStream(file);
  for (const name of ['headers', 'rawHeaders', 'url', 'method', 'httpVersion', 'socket',
    'connection', 'complete']) {
    Object.defineProperty(body, name, { value: req[name], writable: true, configurable: true });
  }
  return body;
}

let spoolCounter = 0;

async function main() {
  const dir = arg('dir');
  const bucket = arg('bucket');
  const port = Number(arg('port', '0'));
  const server = new S3rver({
    address: '127.0.0.1',
    port,
    directory: dir,
    silent: true,
    configureBuckets: [{ name: bucket }],
  });
  // First in the chain: s3rver's own middleware comes after this check.
  server.middleware.unshift(async (ctx, next) => {
    const refusal = checkSignature(ctx.req);
    if (refusal) {
      ctx.status = 403;
      ctx.type = 'application/xml';
      ctx.body = errorBody(refusal[0], refusal[1]);
      return;
    }
    if (ctx.method === 'DELETE' && typeof ctx.query.uploadId === 'string') {
      const bucketName = ctx.path.split('/')[1];
      const uploadDir = path.join(
        server.store.getResourcePath(bucketName, undefined, 'uploads'), ctx.query.uploadId);
      if (!/^[0-9a-f]+$/.test(ctx.query.uploadId) || !fs.existsSync(uploadDir)) {
        ctx.status = 404;
        ctx.type = 'application/xml';
        ctx.body = errorBody('NoSuchUpload', 'The specified upload does not exist.');
        return;
      }
      await fs.promises.rm(uploadDir, { recursive: true, force: true });
      ctx.status = 204;
      return;
    }
    if (ctx.method === 'PUT' && ctx.get('content-length') !== '' &&
        ctx.path.split('/').filter(Boolean).length >= 2) {
      const spoolDir = path.join(dir, '.spool');
      await fs.promises.mkdir(spoolDir, { recursive: true });
      const file = path.join(spoolDir, `${process.pid}-${spoolCounter++}`);
      try {
        if (!(await spool(ctx.req, file))) {
          ctx.status = 400;
          ctx.type = 'application/xml';
          ctx.body = errorBody('IncompleteBody',
            'You did not provide the number of bytes specified by the Content-Length HTTP header');
          return;
        }
        ctx.req = ctx.request.req = spooledRequest(ctx.req, file);
        await next();
      } finally {
        await fs.promises.rm(file, { force: true });
      }
      return;
    }
    await next();
  });
  const address = await server.run();
  process.stdout.write(`listening ${address.port}\n`);
  // Nothing to flush: s3rver writes each object before it answers. Waiting for idle
  // keep-alive connections to close would only slow the tests down.
  const stop = () => process.exit(0);
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main().catch(err => {
  console.error(`serve.js: ${err.stack || err}`);
  process.exit(1);
});
