// The official npm OpenAI client against `agentrl serve` (run by infer/serve's TestOpenAINodeClient):
// completions with logprobs, streaming, chat with tools and the tool's answer, streamed chat, the
// Responses API (a tool call, its answer by previous_response_id, streaming by the client's
// stream helper and by raw events, a forced call, structured output).
// Environment: AGENTRL_BASE_URL, AGENTRL_API_KEY, PEER_QUESTION, PEER_ANSWER. Prints "ok" or fails.
import OpenAI from "openai";
import assert from "node:assert/strict";

const client = new OpenAI({ baseURL: process.env.AGENTRL_BASE_URL, apiKey: process.env.AGENTRL_API_KEY, maxRetries: 0, timeout: 60000 });
const question = process.env.PEER_QUESTION;
const answer = process.env.PEER_ANSWER;

const comp = await client.completions.create({ model: "agentrl", prompt: "the agent", max_tokens: 6, seed: 3, logprobs: 2, ignore_eos: true, return_token_ids: true });
assert.equal(comp.choices.length, 1);
assert.equal(comp.choices[0].logprobs.token_logprobs.length, 6);
assert.equal(comp.choices[0].token_ids.length, 6);

let streamed = "";
const stream = await client.completions.create({ model: "agentrl", prompt: "the agent", max_tokens: 6, seed: 3, ignore_eos: true, stream: true });
for await (const chunk of stream) {
  for (const ch of chunk.choices) streamed += ch.text;
}
assert.equal(streamed, comp.choices[0].text);

const tools = [{ type: "function", function: { name: "calculator", description: "Evaluate an arithmetic expression.",
  parameters: { type: "object", properties: { expression: { type: "string" } }, required: ["expression"] } } }];
const messages = [{ role: "system", content: "You are a careful calculator." }, { role: "user", content: question }];
const chat = await client.chat.completions.create({ model: "agentrl", messages, tools, temperature: 0, logprobs: true, top_logprobs: 2 });
const msg = chat.choices[0].message;
assert.equal(chat.choices[0].finish_reason, "tool_calls");
assert.equal(msg.tool_calls.length, 1);
assert.equal(msg.tool_calls[0].function.name, "calculator");
assert.deepEqual(JSON.parse(msg.tool_calls[0].function.arguments), { expression: "12 + 30" });
assert.ok(chat.choices[0].logprobs.content.length > 0);

const second = await client.chat.completions.create({ model: "agentrl", tools, temperature: 0,
  messages: [...messages, msg, { role: "tool", tool_call_id: msg.tool_calls[0].id, content: "42" }] });
assert.equal(second.choices[0].finish_reason, "stop");
assert.equal(second.choices[0].message.content, answer);

// The client's stream helper accumulates content and tool-call deltas.
const runner = client.chat.completions.stream({ model: "agentrl", messages, tools, temperature: 0 });
const final = await runner.finalChatCompletion();
assert.equal(final.choices[0].finish_reason, "tool_calls");
assert.equal(final.choices[0].message.tool_calls[0].function.arguments, '{"expression":"12 + 30"}');

await assert.rejects(client.completions.create({ model: "agentrl", prompt: "a", logprobs: 50 }), (err) => err.status === 400);

// The Responses API.
const instructions = "You are a careful calculator.";
const rtools = [{ type: "function", name: "calculator", description: "Evaluate an arithmetic expression.", strict: false,
  parameters: { type: "object", properties: { expression: { type: "string" } }, required: ["expression"] } }];
const r1 = await client.responses.create({ model: "agentrl", instructions, input: question, tools: rtools, temperature: 0 });
assert.equal(r1.status, "completed");
const call = r1.output.find((it) => it.type === "function_call");
assert.ok(call, JSON.stringify(r1.output));
assert.equal(call.name, "calculator");
assert.deepEqual(JSON.parse(call.arguments), { expression: "12 + 30" });
const r2 = await client.responses.create({ model: "agentrl", instructions, tools: rtools, temperature: 0, previous_response_id: r1.id,
  input: [{ type: "function_call_output", call_id: call.call_id, output: "42" }] });
assert.equal(r2.output_text, answer);
assert.equal(r2.previous_response_id, r1.id);

// The client's stream helper checks the event sequence and accumulates the final response.
const rs = client.responses.stream({ model: "agentrl", instructions, input: question, tools: rtools, temperature: 0 });
const seen = [];
rs.on("event", (e) => seen.push(e.type));
const rfinal = await rs.finalResponse();
assert.deepEqual(JSON.parse(rfinal.output.find((it) => it.type === "function_call").arguments), { expression: "12 + 30" });
for (const t of ["response.created", "response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done", "response.completed"]) {
  assert.ok(seen.includes(t), `no ${t} in ${seen}`);
}
let rtext = "";
let completed = null;
for await (const e of await client.responses.create({ model: "agentrl", instructions, tools: rtools, temperature: 0, previous_response_id: r1.id, stream: true,
  input: [{ type: "function_call_output", call_id: call.call_id, output: "42" }] })) {
  if (e.type === "response.output_text.delta") rtext += e.delta;
  if (e.type === "response.completed") completed = e.response;
}
assert.equal(rtext, answer);
assert.equal(completed.output[0].content[0].text, answer);

// A forced call, structured output, and an unknown previous response.
const forced = await client.responses.create({ model: "agentrl", input: "héllo wörld", tools: rtools, tool_choice: "required" });
assert.ok(forced.output.some((it) => it.type === "function_call"), JSON.stringify(forced.output));
const structured = await client.responses.create({ model: "agentrl", input: question,
  text: { format: { type: "json_schema", name: "verdict", strict: true,
    schema: { type: "object", properties: { ok: { type: "boolean" } }, required: ["ok"], additionalProperties: false } } } });
assert.equal(typeof JSON.parse(structured.output_text).ok, "boolean");
await assert.rejects(client.responses.create({ model: "agentrl", input: "a", previous_response_id: "resp_unknown" }), (err) => err.status === 404);
console.log("ok");
