// Runs LiveKit's official server SDK (pinned in tools/livekit-sdk) on cases the livekit_sdk test
// writes: usage `node livekit_sdk_check.js <tools/livekit-sdk> <cases.json>`. Each case is
//   {"op": "verify", "token", "api_key", "api_secret"}: the SDK's TokenVerifier on a token the
//     service minted; answers {"ok": true, "claims": ...} or {"ok": false, "error": ...};
//   {"op": "room_api", "url", "api_key", "api_secret", "room", "agent_name"}: the SDK's
//     RoomServiceClient and AgentDispatchClient against the LiveKit stand-in (createRoom,
//     createDispatch, deleteRoom); answers what each returned, or {"error": ...};
//   {"op": "decode_requests", "frames": [hex...]}: SignalRequest frames the service encoded, read
//     with LiveKit's own protobuf classes (@livekit/protocol, the SDK's dependency); answers
//     their protobuf JSON;
//   {"op": "encode_responses"}: SignalResponse frames built with LiveKit's classes, as hex, for
//     the service to read.
// Prints a JSON array, one answer per case.
'use strict';
const fs = require('fs');
const path = require('path');
const { createRequire } = require('module');

const sdkRequire = createRequire(path.join(path.resolve(process.argv[2]), 'package.json'));
const { TokenVerifier, RoomServiceClient, AgentDispatchClient } = sdkRequire('livekit-server-sdk');
// Resolved from the SDK's own directory: the version of the protocol classes it depends on.
const protocolRequire = createRequire(path.join(path.dirname(sdkRequire.resolve('livekit-server-sdk')), 'index.js'));
const protocol = protocolRequire('@livekit/protocol');

function responsesFromLiveKit() {
  const { SignalResponse } = protocol;
  const responses = [
    { case: 'join', value: {
        room: { sid: 'RM_sdk', name: 'sdk-room', numParticipants: 2 },
        participant: { sid: 'PA_caller', identity: 'caller', kind: 0 },
        otherParticipants: [{ sid: 'PA_agent', identity: 'agent-1', kind: 4, state: 2,
                              tracks: [{ sid: 'TR_agent', type: 0, source: 2,
                                         mimeType: 'audio/opus' }] }],
        serverVersion: '1.9.0', iceServers: [{ urls: ['turn:turn.example.com:3478'],
                                               username: 'u', credential: 'c' }],
        subscriberPrimary: true, pingTimeout: 15, pingInterval: 5,
        serverInfo: { version: '1.9.0', protocol: 16, region: 'eu' } } },
    { case: 'offer', value: { type: 'offer', sdp: 'v=0 subscriber', id: 4,
                              midToTrackId: { '0': 'TR_agent' } } },
    { case: 'answer', value: { type: 'answer', sdp: 'v=0 publisher', id: 2 } },
    { case: 'trickle', value: { candidateInit: '{"candidate":"c"}', target: 1, final: true } },
    { case: 'trackPublished', value: { cid: 'caller-voice',
                                       track: { sid: 'TR_caller', type: 0, source: 2 } } },
    { case: 'pongResp', value: { lastPingTimestamp: 1800000000123n, timestamp: 1800000000150n } },
    { case: 'pong', value: 1800000000150n },
    { case: 'leave', value: { canReconnect: false, reason: 5, action: 0 } },
    { case: 'update', value: { participants: [{ sid: 'PA_agent', identity: 'agent-1',
                                                state: 3, disconnectReason: 16 }] } },
    { case: 'refreshToken', value: 'new-token' },
    { case: 'trackSubscribed', value: { trackSid: 'TR_agent' } },
  ];
  return responses.map(
    (message) => Buffer.from(new SignalResponse({ message }).toBinary()).toString('hex'));
}

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
  if (c.op === 'decode_requests') {
    return c.frames.map(
      (hex) => protocol.SignalRequest.fromBinary(Buffer.from(hex, 'hex')).toJson());
  }
  if (c.op === 'encode_responses') return responsesFromLiveKit();
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
