// Signs a Retell webhook body (read from stdin) with Retell's own SDK, the way Retell signs the
// webhooks it sends, and prints the x-retell-signature value. The tests sign with it so the
// service is held to Retell's wire format rather than to our reading of it.
// usage: node sign.js API_KEY [UNIX_MS]   (UNIX_MS: sign as of that time instead of now)
const { sign } = require('retell-sdk');
const { symmetric } = require('retell-sdk/lib/webhook_auth');

const [apiKey, at] = process.argv.slice(2);
const chunks = [];
process.stdin.on('data', (chunk) => chunks.push(chunk));
process.stdin.on('end', async () => {
  const body = Buffer.concat(chunks).toString('utf8');
  const signature = at === undefined ? await sign(body, apiKey)
                                     : await symmetric.sign(body, apiKey, Number(at));
  process.stdout.write(signature);
});
