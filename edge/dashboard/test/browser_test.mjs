// The dashboard in a real browser: Debian's chromium driven by playwright-core against a real
// `calleval serve` with scored calls (recordings from the test corpus served over local HTTP).
// Signs in, filters the list, opens a scored stereo call (the timeline shows the turns the API
// reports), plays from a turn, edits a label, and saves a screenshot of each page.
//   CALLEVAL_BIN=... CALLEVAL_CORPUS_DIR=... [CHROMIUM=/usr/bin/chromium] [SCREENSHOT_DIR=...]
//   node test/browser_test.mjs
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, createReadStream, statSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

const BIN = process.env.CALLEVAL_BIN;
const CTL = process.env.CALLEVALCTL_BIN;
// Calls in the workspace the first page of the list is timed on (the budget: 100,000).
const BUDGET_CALLS = Number(process.env.DASHBOARD_BUDGET_CALLS ?? 100000);
const CORPUS = process.env.CALLEVAL_CORPUS_DIR;
const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
const SHOTS = process.env.SCREENSHOT_DIR ?? join(process.cwd(), "dashboard-screenshots");
assert.ok(BIN, "CALLEVAL_BIN is not set");
assert.ok(CORPUS, "CALLEVAL_CORPUS_DIR is not set");

const tmp = mkdtempSync(join(tmpdir(), "calleval-dashboard-"));
const cleanups = [() => rmSync(tmp, { recursive: true, force: true })];
// On failure: what the service says about the runs and calls (set once the service is up).
let diagnose = async () => undefined;
let lastPage = null; // screenshot at a failure
const step = (what) => console.log(`[${new Date().toISOString().slice(11, 23)}] ${what}`);

// The corpus's recordings over HTTP, as a customer's storage would serve them.
async function serveCorpus() {
  const server = createServer((req, res) => {
    const name = decodeURIComponent(new URL(req.url, "http://x").pathname.slice(1));
    if (!/^[\w.-]+$/.test(name)) return res.writeHead(404).end();
    const path = join(CORPUS, name);
    try {
      res.writeHead(200, { "Content-Type": "audio/wav", "Content-Length": statSync(path).size });
      createReadStream(path).pipe(res);
    } catch {
      res.writeHead(404).end();
    }
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  cleanups.push(() => server.close());
  return `http://127.0.0.1:${server.address().port}`;
}

// A local stand-in for the LLM provider (OpenAI's chat-completions wire format), which cannot be
// reached from a test: it plays the agent of text runs. The agent books a table, unless the
// caller asks to cancel, which it cannot do (it greets first). Asked to propose metrics, it
// proposes two; anything else asked of it gets a neutral answer.
async function serveLlm() {
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      const request = JSON.parse(body || "{}");
      const messages = request.messages ?? [];
      const all = messages.map((m) => (typeof m.content === "string" ? m.content : JSON.stringify(m.content))).join("\n");
      const last = [...messages].reverse().find((m) => m.role === "user")?.content ?? "";
      let content;
      if (/^Propose \d+ metrics/.test(last)) {
        content = { metrics: [
          { name: "Greets the caller", description: "The agent greets the caller by the business name.",
            result_type: "boolean", llm_instructions: "Did the agent greet the caller with the business name?" },
          { name: "Confirms the booking", description: "The agent repeats the booking's details.",
            result_type: "boolean", llm_instructions: "Did the agent confirm the date and the party size?" },
        ] };
      } else if (all.includes("end_call")) {
        content = /cancel/i.test(last) ? { message: "I am sorry, I cannot help with that.", end_call: true }
          : /table/i.test(last) ? { message: "Your table is booked for tonight.", end_call: false }
          : { message: "Maple support, how can I help you today?", end_call: false };
      } else {
        content = { value: "neutral", explanation: "A test answer." };
      }
      res.writeHead(200, { "Content-Type": "application/json" });
      res.end(JSON.stringify({
        id: "chatcmpl-test", object: "chat.completion", created: 1763800000, model: request.model,
        choices: [{ index: 0, message: { role: "assistant", content: JSON.stringify(content) },
          finish_reason: "stop" }],
        usage: { prompt_tokens: 10, completion_tokens: 10, total_tokens: 20 },
      }));
    });
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  cleanups.push(() => server.close());
  return `http://127.0.0.1:${server.address().port}/v1`;
}

async function startService(llm) {
  const data = join(tmp, "data");
  const proc = spawn(BIN, ["serve", "--data-dir", data, "--http-addr", "127.0.0.1:0",
    "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--access-log", "false", "--allow-private-hosts", "127.0.0.1",
    "--llm-base-url", llm, "--llm-api-key", "test-key", "--llm-model", "test-model"],
  { stdio: ["ignore", "pipe", "inherit"] });
  cleanups.unshift(() => proc.kill("SIGTERM"));
  const base = await new Promise((resolve, reject) => {
    let seen = "";
    proc.stdout.on("data", (chunk) => {
      seen += chunk;
      const m = seen.match(/HTTP on (http:\/\/\S+)/);
      if (m) resolve(m[1]);
    });
    proc.on("exit", (code) => reject(new Error(`calleval serve exited ${code}: ${seen}`)));
  });
  const key = readFileSync(join(data, "bootstrap-key"), "utf8").trim();
  return { base, key, data };
}

function client(base, key) {
  return async (method, path, body) => {
    const res = await fetch(base + path, {
      method,
      headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`);
    return text ? JSON.parse(text) : undefined;
  };
}

async function main() {
  mkdirSync(SHOTS, { recursive: true });
  const files = await serveCorpus();
  const { base, key, data } = await startService(await serveLlm());
  const api = client(base, key);
  diagnose = async () => {
    console.error("runs:", JSON.stringify((await api("GET", "/api/v1/runs")).data, null, 1));
    const calls = (await api("GET", "/api/public/v1/calls?per_page=5")).data;
    console.error("latest calls:", JSON.stringify(calls.map((c) => [c.call_identifier, c.analysis_status,
      c.failure_reason, c.transcript, c.metric_results])));
  };
  step(`service at ${base}`);

  const agent = await api("POST", "/api/v1/agents", {
    name: "Maple support", phone_number: "+14155550123", language_id: 1,
    instructions: "Answer insurance questions.",
  });
  const transcriptOf = (name) =>
    JSON.parse(readFileSync(join(CORPUS, `${name}.transcript.json`), "utf8"));
  const voice = {};
  for (const name of ["interruptions", "basic_stereo"]) {
    voice[name] = await api("POST", "/api/public/v1/calls", {
      call_identifier: `voice-${name}`, agent_id: agent.id, recording_url: `${files}/${name}.wav`,
      transcript: transcriptOf(name), tag: "voice-check", label: "unreviewed",
    });
  }
  for (let i = 0; i < 12; i++) {
    await api("POST", "/api/public/v1/calls", {
      call_identifier: `text-${String(i).padStart(2, "0")}`, agent_id: agent.id,
      tag: i % 3 === 0 ? "billing" : "bookings",
      transcript: [
        { role: "AI Assistant", content: "Thanks for calling, how can I help?" },
        { role: "User", content: i % 3 === 0 ? "A question about my bill." : "I want to book a table." },
      ],
    });
  }
  // Scored before the browser looks: the call page is checked against the API's figures.
  const deadline = Date.now() + 120_000;
  for (const name of Object.keys(voice)) {
    for (;;) {
      voice[name] = await api("GET", `/api/public/v1/calls/${voice[name].id}`);
      if (["completed", "failed"].includes(voice[name].analysis_status)) break;
      assert.ok(Date.now() < deadline, `call ${name} not scored in 120 s`);
      await new Promise((r) => setTimeout(r, 250));
    }
    assert.equal(voice[name].analysis_status, "completed", JSON.stringify(voice[name]));
  }
  step("calls ingested and scored");

  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] });
  cleanups.unshift(() => browser.close());
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  lastPage = page;
  const consoleErrors = [];
  // A failed request is logged by the browser too; those the pages expect (the refused key, a
  // call without a waveform) they show themselves. Anything else logged as an error fails.
  page.on("console", (m) => m.type() === "error" && !m.text().startsWith("Failed to load resource") &&
    consoleErrors.push(m.text()));
  page.on("pageerror", (e) => consoleErrors.push(String(e)));

  // Sign in: a wrong key is refused with a clear message, the right one opens the calls.
  const started = Date.now();
  await page.goto(base + "/");
  await page.getByLabel("API key").fill("cev_not-a-key");
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("alert").filter({ hasText: "not valid" }).waitFor();
  await page.screenshot({ path: join(SHOTS, "01-sign-in-refused.png") });
  await page.getByLabel("API key").fill(key);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.locator("table.calls tbody tr").first().waitFor();
  step(`signed in, first page of calls interactive after ${Date.now() - started} ms`);
  assert.equal(await page.locator("table.calls tbody tr").count(), 14);
  await page.screenshot({ path: join(SHOTS, "02-calls.png"), fullPage: true });

  // Filters: the tag, then the type; the address keeps them.
  await page.getByLabel("Tag").fill("billing");
  await page.getByLabel("Tag").press("Enter");
  await page.waitForFunction(() => document.querySelectorAll("table.calls tbody tr").length === 4);
  assert.match(page.url(), /tag=billing/);
  await page.getByRole("button", { name: "Clear filters" }).click();
  await page.getByLabel("Type").selectOption("voice");
  await page.waitForFunction(() => document.querySelectorAll("table.calls tbody tr").length === 2);
  await page.screenshot({ path: join(SHOTS, "03-calls-filtered-voice.png"), fullPage: true });
  step("filters by tag and type");

  // The scored stereo call, reached with the keyboard alone: Tab until its link has the focus.
  const call = voice.interruptions;
  await page.reload(); // focus starts from the top of the page
  await page.locator("table.calls tbody tr").nth(1).waitFor();
  let tabs = 0;
  while (!(await page.evaluate(() => document.activeElement?.textContent === "voice-interruptions"))) {
    await page.keyboard.press("Tab");
    assert.ok(++tabs < 60, "the call's link is not reachable with Tab");
  }
  await page.keyboard.press("Enter");
  step(`call link reached with ${tabs} Tab presses`);
  // Its timeline's turns are the API's.
  await page.getByRole("heading", { name: "voice-interruptions" }).waitFor();
  await page.locator(".card.metric-latency .headline").waitFor();
  const timed = (role) => call.transcript.filter((t) => t.role === role && t.start_time !== undefined).length;
  assert.equal(await page.locator(".lane-agent .turn").count(), timed("AI Assistant"));
  assert.equal(await page.locator(".lane-caller .turn").count(), timed("User"));
  const latency = call.standard_metrics.find((m) => m.standard_metric_key === "latency");
  assert.equal(await page.locator(".marker-latency").count(), latency.result.turns.length);
  const userInterruptions = call.standard_metrics.find((m) => m.standard_metric_key === "user_interruptions");
  assert.equal(await page.locator(".marker-user_interruption").count(), userInterruptions.result.events.length);
  assert.ok(userInterruptions.result.events.length > 0, "the corpus call has caller interruptions");
  assert.equal(await page.locator(".transcript li").count(), call.transcript.length);
  const shownLatency = await page.locator(".card.metric-latency .headline").textContent();
  assert.equal(shownLatency, `${Math.round(latency.result.average_ms).toLocaleString("en-US")} ms`);
  // The waveform, drawn from the service's peaks: both channels, with ink where there is speech.
  const wave = await api("GET", `/api/public/v1/calls/${call.id}/waveform`);
  assert.equal(wave.channels, 2);
  await page.locator("canvas.waveform").waitFor();
  const inked = await page.locator("canvas.waveform").evaluate((c) => {
    const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++;
    return n / (d.length / 4);
  });
  assert.ok(inked > 0.01 && inked < 0.9, `waveform ink ${inked}`);
  await page.screenshot({ path: join(SHOTS, "04-call.png"), fullPage: true });

  // Play from the third turn: the player seeks there.
  const third = call.transcript[2];
  await page.locator(".transcript li").nth(2).locator("button.time").click();
  await page.waitForFunction(
    (t) => Math.abs(document.querySelector("audio").currentTime - t) < 0.5, third.start_time);
  step(`played from turn 3 at ${third.start_time} s`);

  // Edit the label in place.
  await page.getByLabel("Label", { exact: true }).fill("reviewed");
  await page.getByRole("button", { name: "Save" }).click();
  await page.getByText("Saved").waitFor();
  const saved = await api("GET", `/api/public/v1/calls/${call.id}`);
  assert.equal(saved.label, "reviewed");
  step("label edited");

  // Make a scenario from the call: its caller's lines, in order, become the script (masked,
  // blank ones left out), and it keeps a link to the call.
  await page.getByRole("button", { name: "Make a scenario" }).click();
  const made = page.getByRole("status").filter({ hasText: "Made" });
  await made.waitFor();
  const replayHref = await made.getByRole("link").getAttribute("href");
  const replay = await api("GET", `/api/v1/scenarios/${replayHref.match(/scenarios\/(\d+)/)[1]}`);
  assert.equal(replay.source_call_id, call.id);
  assert.equal(replay.agent_id, call.agent_id);
  assert.equal(replay.caller_script.length,
    call.transcript.filter((t) => t.role === "User" && t.content.trim() !== "").length);
  await page.screenshot({ path: join(SHOTS, "04b-call-replayed.png"), fullPage: true });
  step(`replayed as scenario ${replay.id} of ${replay.caller_script.length} caller lines`);

  // Metrics: a phrase metric made in the editor (with an outcome rule), then a code metric
  // validated and tested against a call in the sandbox.
  await page.setViewportSize({ width: 1280, height: 900 });
  await page.getByRole("link", { name: "Metrics", exact: true }).click();
  await page.getByRole("link", { name: "New metric" }).click();
  await page.getByRole("heading", { name: "New metric" }).waitFor();
  await page.getByLabel("Name").fill("Booking confirmed");
  await page.getByLabel("Type").selectOption({ label: "Phrase check" });
  await page.getByLabel("Phrases (one per line)").fill("booked");
  await page.getByRole("button", { name: "Add rule" }).click();
  await page.getByRole("button", { name: "Create metric" }).click();
  await page.getByText("Saved").waitFor();
  const phrase = (await api("GET", "/api/v1/metrics?search=Booking")).global_metrics[0];
  assert.equal(phrase.metrics_type, "specific_text_/_phrase_check");
  assert.deepEqual(phrase.phrases, ["booked"]);
  assert.equal(phrase.structured_output[0].outcome_classification, "meets_expectations");
  await page.screenshot({ path: join(SHOTS, "07-metric-phrase.png"), fullPage: true });
  step(`phrase metric ${phrase.id} created in the editor`);

  // Generate with AI: two proposals for the agent; one added as it came.
  await page.getByRole("link", { name: "Metrics", exact: true }).click();
  await page.getByText("Generate with AI").click();
  await page.getByLabel("For agent").selectOption({ label: "Maple support" });
  await page.getByRole("button", { name: "Propose metrics" }).click();
  await page.locator(".proposal", { hasText: "Greets the caller" }).getByRole("button", { name: "Add" }).click();
  await page.getByRole("link", { name: "Greets the caller" }).waitFor();
  assert.equal(await page.locator(".proposal").count(), 1);
  await page.screenshot({ path: join(SHOTS, "08a-metrics-generated.png"), fullPage: true });
  step("generate with AI: a proposal added");

  await page.getByRole("link", { name: "New metric" }).click();
  await page.getByRole("heading", { name: "New metric" }).waitFor();
  await page.getByLabel("Name").fill("Long enough");
  await page.getByLabel("Type").selectOption({ label: "Code" });
  const editor = page.getByLabel("Code (Python", { exact: false });
  await editor.fill("metric['result'] = len(context['transcript']) >= (\n");
  await page.getByRole("button", { name: "Validate" }).click();
  await page.getByTestId("validation").filter({ hasText: "Line 1" }).waitFor();
  await editor.fill("metric['result'] = len(context['transcript']) >= 2\nmetric['explanation'] = '%d turns' % len(context['transcript'])");
  await page.getByRole("button", { name: "Validate" }).click();
  await page.getByTestId("validation").filter({ hasText: "The code is valid." }).waitFor();
  await page.getByLabel("Test against call").selectOption({ label: "voice-interruptions" });
  await page.getByRole("button", { name: "Run test" }).click();
  const tested = page.getByTestId("test-result");
  await tested.filter({ hasText: "Result: pass" }).waitFor();
  assert.match(await tested.textContent(), new RegExp(`${call.transcript.length} turns`));
  await page.screenshot({ path: join(SHOTS, "08-metric-code-tested.png"), fullPage: true });
  await page.getByRole("button", { name: "Create metric" }).click();
  await page.getByText("Saved").waitFor();
  step("code metric validated, tested against a call, created");

  // Scenarios: one made in the editor, one through the API; both run as a batch over text, the
  // pass rate followed live. The agent books (passes) but cannot cancel (does not pass): 50%.
  await page.getByRole("link", { name: "Scenarios", exact: true }).click();
  await page.getByRole("link", { name: "New scenario" }).click();
  await page.getByRole("heading", { name: "New scenario" }).waitFor();
  await page.getByLabel("Agent").selectOption({ label: "Maple support" });
  await page.getByLabel("Name").fill("Book a table");
  await page.getByLabel("Caller script", { exact: false }).fill("Hello\nI would like a table for two tonight.");
  await page.getByLabel("Booking confirmed").check();
  await page.getByRole("button", { name: "Create scenario" }).click();
  await page.getByText("Saved").waitFor();
  await api("POST", "/api/v1/scenarios", {
    agent_id: agent.id, name: "Cancel a booking", caller_script: ["Hello", "Please cancel my booking."],
    metric_ids: [phrase.id],
  });
  await page.getByRole("link", { name: "Scenarios", exact: true }).click();
  await page.getByLabel("Select Book a table").check();
  await page.getByLabel("Select Cancel a booking").check();
  await page.getByRole("button", { name: /Run 2 selected as a batch/ }).click();
  await page.getByRole("heading", { name: /Batch run #/ }).waitFor();
  await page.screenshot({ path: join(SHOTS, "09-batch-started.png"), fullPage: true });
  await page.getByTestId("pass-rate").filter({ hasText: "50%" }).waitFor({ timeout: 90_000 });
  await page.locator("h1 .status-completed").waitFor({ timeout: 30_000 });
  assert.equal(await page.locator("table.runs tbody tr").count(), 2);
  await page.screenshot({ path: join(SHOTS, "10-batch-done.png"), fullPage: true });
  step("batch run of two scenarios: pass rate 50%");

  // The same two scenarios again, compared with that batch: one run a side is too few to tell,
  // so every figure, and the batch, is inconclusive.
  const firstBatch = Number(new URL(page.url()).hash.split("/").pop());
  await page.getByRole("link", { name: "Scenarios", exact: true }).click();
  await page.getByLabel("Select Book a table").check();
  await page.getByLabel("Select Cancel a booking").check();
  await page.getByLabel("Baseline batch").fill(String(firstBatch));
  await page.getByRole("button", { name: /Run 2 selected as a batch/ }).click();
  await page.getByRole("heading", { name: /Batch run #/ }).waitFor();
  await page.locator("h1 .status-completed").waitFor({ timeout: 90_000 });
  const compared = page.getByRole("region", { name: "Comparison with the baseline" });
  await compared.getByRole("heading", { name: new RegExp(`Compared with batch run #${firstBatch}`) }).waitFor();
  await compared.locator("h2 .verdict-inconclusive").waitFor({ timeout: 30_000 });
  const figureRows = compared.locator("table.comparison tbody tr");
  assert.ok(await figureRows.count() >= 2);
  assert.equal(await compared.locator("tbody tr", { hasText: "passed" }).count(), 2);
  assert.equal(await compared.locator("tbody tr[data-verdict=inconclusive]").count(), await figureRows.count());
  await page.screenshot({ path: join(SHOTS, "10b-batch-compared.png"), fullPage: true });
  step("batch run compared with its baseline: inconclusive with one run a side");

  // Agents: one made in the editor with a websocket channel; its credential is written, reported
  // as set, and never shown back.
  await page.getByRole("link", { name: "Agents", exact: true }).click();
  await page.getByRole("link", { name: "New agent" }).click();
  await page.getByRole("heading", { name: "New agent" }).waitFor();
  await page.getByLabel("Name").fill("Web bot");
  await page.getByLabel("Instructions", { exact: false }).fill("Take table bookings.");
  await page.getByLabel("Transport").selectOption("websocket");
  await page.getByLabel("websocket url").fill("wss://agent.example.com/ws");
  await page.getByLabel(/auth token/).fill("s3cret-token-value");
  await page.getByRole("button", { name: "Create agent" }).click();
  await page.getByText("Saved").waitFor();
  await page.getByText("(set; type to replace)").waitFor();
  const webBot = (await api("GET", "/api/v1/agents")).data.find((a) => a.name === "Web bot");
  assert.equal(webBot.web_channel.websocket_url, "wss://agent.example.com/ws");
  assert.equal(webBot.web_channel.auth_token_set, true);
  assert.ok(!(await page.content()).includes("s3cret-token-value"), "a credential is shown back");
  await page.getByRole("heading", { name: "Metrics on this agent's calls" }).waitFor();
  await page.getByLabel("Voice Change Detection").uncheck();
  // The toggle is saved at once (PUT standard_metrics): wait for the service to say so.
  for (let i = 0; ; i++) {
    const toggled = await api("GET", `/api/v1/agents/${webBot.id}`);
    if (JSON.stringify(toggled.disabled_metric_ids) === "[9]") break;
    assert.ok(i < 50, `disabled_metric_ids ${JSON.stringify(toggled.disabled_metric_ids)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  await page.screenshot({ path: join(SHOTS, "11-agent.png"), fullPage: true });
  step("agent created with a write-only credential; a standard metric switched off");

  // Trends: the agent's charts; a point opens the calls of its bucket.
  await page.goto(`${base}/#/agents/${agent.id}/trends`);
  await page.locator("figure.chart").first().waitFor();
  const latencyDot = page.locator("figure.chart").first().locator("circle.dot").last();
  await latencyDot.waitFor();
  await page.screenshot({ path: join(SHOTS, "12-trends.png"), fullPage: true });
  await latencyDot.click();
  await page.getByTestId("time-range").waitFor();
  await page.locator("table.calls tbody tr").first().waitFor();
  assert.ok(await page.locator("table.calls tbody tr", { hasText: "voice-interruptions" }).count() === 1,
    "the bucket's calls include the scored stereo call");
  assert.match(page.url(), new RegExp(`agent_id=${agent.id}`));
  step("trends: a latency point opened its bucket's calls");

  // Error and empty states. The service's own 429, 503 and 401 are tested with the service;
  // here the list's requests are answered with them, to see what a person reads.
  const listRoute = (url) => new URL(url).pathname === "/api/public/v1/calls";
  const answer = (status, code, message, headers = {}) => (route) => route.fulfill({
    status, headers: { "Content-Type": "application/json", ...headers },
    body: JSON.stringify({ error: { status, code, message, details: [] } }),
  });
  await page.route(listRoute, answer(503, "unavailable", "database not ready", { "Retry-After": "2" }));
  await page.goto(`${base}/#/calls?tag=none-such`);
  await page.getByRole("alert").filter({ hasText: "The service is unavailable: database not ready (trying again in 2 s)" }).waitFor();
  await page.screenshot({ path: join(SHOTS, "13-error-503.png") });
  await page.unroute(listRoute);
  await page.getByRole("button", { name: "Try again" }).click();
  await page.getByText("No call matches these filters.").waitFor();
  // A 429 is retried by itself once Retry-After has passed.
  await page.route(listRoute, answer(429, "rate_limited", "too many requests", { "Retry-After": "1" }));
  await page.goto(`${base}/#/calls`);
  await page.getByRole("alert").filter({ hasText: "Too many requests for this key; trying again in 1 s." }).waitFor();
  await page.unroute(listRoute);
  await page.locator("table.calls tbody tr").first().waitFor();
  assert.equal(await page.getByRole("alert").count(), 0);
  await page.route(listRoute, answer(401, "unauthenticated", "unknown API key"));
  await page.goto(`${base}/#/calls?tag=billing`);
  await page.getByText("Your API key is no longer valid. Sign in with a current key.").waitFor();
  await page.getByLabel("API key").waitFor();
  assert.equal(await page.evaluate(() => sessionStorage.length), 0, "the key outlived its 401");
  await page.unroute(listRoute);
  await page.getByLabel("API key").fill(key);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.locator("table.calls tbody tr").first().waitFor();
  step("503, 429, 401 and an empty list read as they should");

  // Narrow screens: the same page at 390 px.
  await page.goto(`${base}/#/calls/${call.id}`);
  await page.locator(".card.metric-latency .headline").waitFor();
  await page.setViewportSize({ width: 390, height: 844 });
  await page.screenshot({ path: join(SHOTS, "05-call-390px.png"), fullPage: true });
  await page.getByRole("link", { name: "← Calls" }).click();
  await page.locator("table.calls tbody tr").first().waitFor();
  await page.screenshot({ path: join(SHOTS, "06-calls-390px.png"), fullPage: true });

  await firstPageBudget(browser, base, data);

  assert.deepEqual(consoleErrors, [], "the page logged errors");
  step(`screenshots in ${SHOTS}`);
}

// The budget: the first page of calls with BUDGET_CALLS calls in the workspace (a workspace of
// its own, without credits, so the calls end `skipped` and nothing else runs meanwhile). The
// service's time for the page (median of 20 requests) and the time until the page's rows are
// on screen after a reload, as a returning user sees it.
async function firstPageBudget(browser, base, data) {
  if (!BUDGET_CALLS) return;
  assert.ok(CTL, "CALLEVALCTL_BIN is not set");
  const ctl = (...args) => new Promise((resolve, reject) => {
    const p = spawn(CTL, ["--data-dir", data, ...args]);
    let out = "";
    p.stdout.on("data", (c) => (out += c));
    p.on("exit", (code) => (code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`callevalctl exited ${code}`))));
  });
  const created = await ctl("workspace", "create", "--name", "bulk", "--credits", "0");
  // A key of the first workspace granted the new one: signing in offers both.
  const granted = await ctl("key", "create", "--workspace", "1", "--grant", String(created.id));
  const bulk = client(base, created.api_key);
  const agent = await bulk("POST", "/api/v1/agents", {
    name: "Bulk bot", phone_number: "+14155550199", language_id: 1, instructions: "x",
  });
  const started = Date.now();
  let next = 0;
  const worker = async () => {
    while (next < BUDGET_CALLS) {
      const i = next++;
      await bulk("POST", "/api/public/v1/calls", {
        call_identifier: `bulk-${i}`, agent_id: agent.id, tag: i % 2 ? "odd" : "even",
        transcript: [{ role: "AI Assistant", content: "Hello" }, { role: "User", content: "Hi" }],
      });
    }
  };
  await Promise.all(Array.from({ length: 32 }, worker));
  step(`${BUDGET_CALLS} calls ingested in ${((Date.now() - started) / 1000).toFixed(1)} s`);

  const times = [];
  for (let i = 0; i < 20; i++) {
    const t = performance.now();
    await bulk("GET", "/api/public/v1/calls?per_page=25");
    times.push(performance.now() - t);
  }
  times.sort((a, b) => a - b);
  const serverMs = times[10];

  const page = await (await browser.newContext({ viewport: { width: 1280, height: 900 } })).newPage();
  await page.goto(base + "/");
  await page.getByLabel("API key").fill(granted.api_key);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("heading", { name: "Choose a workspace" }).waitFor();
  assert.equal(await page.locator(".workspaces button").count(), 2);
  await page.screenshot({ path: join(SHOTS, "14-choose-workspace.png") });
  await page.locator(".workspaces button", { hasText: "bulk" }).click();
  await page.locator("table.calls tbody tr").first().waitFor();
  const shown = [];
  for (let i = 0; i < 3; i++) {
    const t = Date.now();
    await page.reload();
    await page.locator("table.calls tbody tr").nth(24).waitFor();
    shown.push(Date.now() - t);
  }
  shown.sort((a, b) => a - b);
  const count = await page.locator(".count").textContent();
  assert.match(count, new RegExp(`${BUDGET_CALLS.toLocaleString()} calls`));
  step(`first page of ${BUDGET_CALLS} calls: service ${serverMs.toFixed(1)} ms (median of 20), ` +
    `rows on screen ${shown[1]} ms after a reload (median of 3)`);
  // The budgets are 100 ms and 1 s on an idle machine; the test fails only far past them (CI
  // runs other tests beside it), and the figures above are what to read.
  assert.ok(serverMs < 500, `first page took ${serverMs} ms in the service`);
  assert.ok(shown[1] < 3000, `first page took ${shown[1]} ms to show`);
  await page.context().close();
}

try {
  await main();
  console.log("browser test passed");
} catch (e) {
  console.error(e);
  process.exitCode = 1;
  try {
    await lastPage?.screenshot({ path: join(SHOTS, "failure.png"), fullPage: true });
    console.error(`at ${lastPage?.url()}; screenshot ${join(SHOTS, "failure.png")}`);
    await diagnose();
  } catch (d) {
    console.error("could not ask the service:", d.message);
  }
} finally {
  for (const c of cleanups) {
    try {
      await c();
    } catch {
      // Best effort: the test's outcome is already decided.
    }
  }
}
