// Asks the carriers' official SDKs (pinned in tools/carrier-sdks) whether they accept signed
// webhooks: usage `node carrier_sdk_check.js <tools/carrier-sdks> <cases.json>`. Each case is
// {"carrier": "telnyx", "public_key", "body", "headers"} or {"carrier": "plivo", "method", "url",
// "nonce", "auth_token", "signature", "params"}; prints a JSON array of booleans, one per case.
'use strict';
const fs = require('fs');
const path = require('path');
const { createRequire } = require('module');

const sdkRequire = createRequire(path.join(path.resolve(process.argv[2]), 'package.json'));
const Telnyx = sdkRequire('telnyx');
const plivo = sdkRequire('plivo');

async function accepts(c) {
  if (c.carrier === 'telnyx') {
    // The SDK's own entry point for webhooks: verifies telnyx-signature-ed25519 over
    // telnyx-timestamp|body with the public key, and the timestamp's age.
    const client = new Telnyx({ apiKey: 'unused', publicKey: c.public_key });
    try {
      await client.webhooks.unwrap(c.body, { headers: c.headers });
      return true;
    } catch (e) {
      return false;
    }
  }
  if (c.carrier === 'plivo') {
    return Boolean(
      plivo.validateV3Signature(c.method, c.url, c.nonce, c.auth_token, c.signature, c.params));
  }
  throw new Error(`unknown carrier ${c.carrier}`);
}

(async () => {
  const cases = JSON.parse(fs.readFileSync(process.argv[3], 'utf8'));
  const out = [];
  for (const c of cases) out.push(await accepts(c));
  process.stdout.write(JSON.stringify(out));
})().catch((e) => {
  process.stderr.write(String(e && e.stack ? e.stack : e));
  process.exit(1);
});
