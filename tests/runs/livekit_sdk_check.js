// Runs LiveKit's official server SDK (pinned in tools/livekit-sdk) on cases the livekit_sdk test
// writes: usage `node livekit_sdk_check.js <tools/livekit-sdk> <cases.json>`. Each case is
//   {"op": "verify", "token", "api_key", "api_secret"}: the SDK's TokenVerifier on a token the
//     service minted; answers {"ok": true, "claims": ...} or {"ok": false, "error": ...};
//   {"op": "room_api", "url", "api_key", "api_secret", "room", "agent_name"}: the SDK's
//     RoomServiceClient and AgentDispatchClient against the LiveKit stand-in (createRoom,
//     createDispatch, deleteRoom); answers what each returned, or {"error": ...}.
// Prints a JSON array, one answer per case.
'use strict';
const fs = require('fs');
const path = require('path');
const { createRequire } = require('module');

const sdkRequire = createRequire(path.join(path.resolve(process.argv[2]), 'package.json'));
const { TokenVerifier, RoomServiceClient, AgentDispatchClient } = sdkRequire('livekit-server-sdk');

async function run(c) {
  if (c.op === 'verify') {
    try {
      const claims = await new TokenVerifier(c.api_key, c.api_secret).verify(c.token);
      return { ok: true, claims };
    } catch (e) {
      return { ok: false, error: String(e && e.message ? e.message : e) };
    }
  }
  if (c.op === 'room_api') {
    try {
      const rooms = new RoomServiceClient(c.url, c.api_key, c.api_secret);
      const dispatches = new AgentDispatchClient(c.url, c.api_key, c.api_secret);
      const room = await rooms.createRoom({ name: c.room, emptyTimeout: 30, maxParticipants: 3 });
      const dispatch = await dispatches.createDispatch(c.room, c.agent_name, { metadata: 'sdk' });
      await rooms.deleteRoom(c.room);
      return { room: room.name, room_sid: room.sid, dispatch_id: dispatch.id,
               dispatch_agent: dispatch.agentName };
    } catch (e) {
      return { error: String(e && e.message ? e.message : e), status: e && e.status };
    }
  }
  throw new Error(`unknown op ${c.op}`);
}

(async () => {
  const cases = JSON.parse(fs.readFileSync(process.argv[3], 'utf8'));
  const out = [];
  for (const c of cases) out.push(await run(c));
  process.stdout.write(JSON.stringify(out));
})().catch((e) => {
  process.stderr.write(String(e && e.stack ? e.stack : e));
  process.exit(1);
});
