// Drives a running edge with the official `openai` and `cloudflare` npm
// SDKs, unmodified (only the base URL and the key are ours), sending the
// request fields the way each documents them. It prints one JSON object:
// for each check, what came back (TestNpmSDKs asserts on it).
import OpenAI from "openai";
import Cloudflare from "cloudflare";

const { EDGE, TOKEN, TENANT, MODEL } = process.env;
const openai = new OpenAI({ baseURL: `${EDGE}/v1`, apiKey: TOKEN, maxRetries: 0 });
const cf = new Cloudflare({ baseURL: `${EDGE}/client/v4`, apiToken: TOKEN, maxRetries: 0 });
const out = {};

// record runs one check: its value, or the API error's status and message.
async function record(name, fn) {
  try {
    out[name] = { ok: true, value: await fn() };
  } catch (e) {
    out[name] = { ok: false, status: e.status ?? null, message: String(e.message ?? e) };
  }
}

const messages = [{ role: "user", content: "Tell me a story about a dog" }];

await record("n", async () => {
  const r = await openai.chat.completions.create({ model: MODEL, messages, n: 3, max_tokens: 8, temperature: 1, seed: 11 });
  return { choices: r.choices.map((c) => ({ index: c.index, seed: c.seed, text: c.message.content })), usage: r.usage };
});
await record("n stream", async () => {
  const stream = await openai.chat.completions.create({ model: MODEL, messages, n: 3, max_tokens: 8, temperature: 1, seed: 11, stream: true });
  const texts = {};
  for await (const chunk of stream) {
    for (const c of chunk.choices) texts[c.index] = (texts[c.index] ?? "") + (c.delta?.content ?? "");
  }
  return texts;
});
await record("n too many", () => openai.chat.completions.create({ model: MODEL, messages, n: 9 }));
await record("logit_bias", async () => {
  const r = await openai.completions.create({ model: MODEL, prompt: "Once upon a time", max_tokens: 8, logit_bias: { "1": -100 } });
  return r.choices[0].text;
});
await record("logit_bias outside the vocabulary", () =>
  openai.completions.create({ model: MODEL, prompt: "Once upon a time", max_tokens: 8, logit_bias: { "999999": -100 } }));
await record("metadata and user", async () => {
  const r = await openai.chat.completions.create({ model: MODEL, messages, max_tokens: 4, metadata: { app: "npm-sdk", team: "a" }, user: "end-user-7", store: false });
  return r.choices.length;
});
await record("metadata too many", () =>
  openai.chat.completions.create({ model: MODEL, messages, max_tokens: 4, metadata: Object.fromEntries([...Array(17).keys()].map((i) => [`k${i}`, "v"])) }));
await record("reasoning_effort without a thinking switch", () =>
  openai.chat.completions.create({ model: MODEL, messages, max_tokens: 4, reasoning_effort: "low" }));
await record("prompt_cache_key", async () => {
  const r = await openai.chat.completions.create({ model: MODEL, messages, max_tokens: 4, prompt_cache_key: "conversation-1" });
  return r.choices.length;
});
await record("cloudflare run", () =>
  cf.ai.run(MODEL, { account_id: TENANT, prompt: "Once upon a time", max_tokens: 8 }));
await record("cloudflare options.rejectIfBusy", () =>
  cf.ai.run(MODEL, { account_id: TENANT, prompt: "Once upon a time", max_tokens: 4, options: { rejectIfBusy: true } }));
await record("cloudflare another account", () =>
  cf.ai.run(MODEL, { account_id: "someone-else", prompt: "Once upon a time", max_tokens: 4 }));

console.log(JSON.stringify(out));
