// sg-openai.mjs — drive an OpenAI-compatible endpoint (sg-proxy) with the
// official `openai` npm client, for tools/demo.sh, tools/serve.sh and
// tests/e2e/openai.bats.
//
// usage: node sg-openai.mjs --modules DIR --base-url URL [--api-key KEY]
//
// DIR is where tools/demo/openai/install.sh installed the pinned client
// (DIR/node_modules/openai).  Commands come on standard input, one JSON
// object a line; each gets exactly one JSON line on standard output, in
// order, so a shell can run this as a coprocess and interleave its own
// steps (hold an engine, release it) between turns.
//
//   {"op": "chat", <chat.completions.create params>, "headers": {...}}
//   {"op": "responses", <responses.create params>, "headers": {...}}
//       one call as given ("stream": true streams)
//   {"op": "turn", "session": S, "content": TEXT, "api": "chat"|"responses",
//    "model": M, "stream": B, "max_tokens": N}
//       the next turn of multi-turn session S: the client keeps the
//       conversation (every earlier user message and assistant reply) and
//       sends it with prompt_cache_key S, as a chat application would
//   {"op": "models"}
//
// A result: {"ok": true, "api", "id", "model", "text", "fingerprint"
// (system_fingerprint: the serving cluster with sg-mockengine), "usage":
// {"prompt_tokens", "cached_tokens", "completion_tokens"}, "finish_reason",
// "chunks" (streamed events), "session" (response header
// x-multi-turn-session-id), "request_id", "status", "ms"}, or
// {"ok": false, "status", "code", "type", "error"}.  The client never
// retries (maxRetries 0), so every answer is the proxy's own.
import { createRequire } from 'node:module';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';

function args(argv) {
	const o = { apiKey: process.env.OPENAI_API_KEY || 'sk-stargate-local' };
	for (let i = 2; i < argv.length; i++) {
		const a = argv[i], v = argv[i + 1];
		if (a === '--modules') { o.modules = v; i++; }
		else if (a === '--base-url') { o.baseURL = v; i++; }
		else if (a === '--api-key') { o.apiKey = v; i++; }
		else {
			process.stderr.write(`sg-openai: unknown argument '${a}'\n`);
			process.exit(64);
		}
	}
	if (!o.modules || !o.baseURL) {
		process.stderr.write('usage: node sg-openai.mjs --modules DIR ' +
		    '--base-url URL [--api-key KEY]\n');
		process.exit(64);
	}
	return o;
}

const opt = args(process.argv);
const require = createRequire(join(resolve(opt.modules), 'package.json'));
const OpenAI = require('openai');
const client = new OpenAI({ baseURL: opt.baseURL, apiKey: opt.apiKey,
    maxRetries: 0, timeout: 30000 });
const sessions = new Map();

function meta(response) {
	return { status: response.status,
	    session: response.headers.get('x-multi-turn-session-id'),
	    request_id: response.headers.get('x-request-id') };
}

function chatUsage(u) {
	return u ? { prompt_tokens: u.prompt_tokens,
	    cached_tokens: u.prompt_tokens_details?.cached_tokens ?? 0,
	    completion_tokens: u.completion_tokens } : null;
}

function respUsage(u) {
	return u ? { prompt_tokens: u.input_tokens,
	    cached_tokens: u.input_tokens_details?.cached_tokens ?? 0,
	    completion_tokens: u.output_tokens } : null;
}

async function chat(params, headers) {
	if (!params.stream) {
		const { data, response } = await client.chat.completions
		    .create(params, { headers }).withResponse();
		const c = data.choices[0];
		return { ...meta(response), api: 'chat', id: data.id,
		    model: data.model, object: data.object,
		    text: c.message.content, role: c.message.role,
		    finish_reason: c.finish_reason,
		    fingerprint: data.system_fingerprint ?? null,
		    usage: chatUsage(data.usage), chunks: 0 };
	}
	const p = { ...params, stream_options: { include_usage: true } };
	const { data: stream, response } = await client.chat.completions
	    .create(p, { headers }).withResponse();
	const r = { ...meta(response), api: 'chat', id: null, model: null,
	    object: null, text: '', role: null, finish_reason: null,
	    fingerprint: null, usage: null, chunks: 0 };
	for await (const ch of stream) {
		r.chunks++;
		r.id = ch.id;
		r.model = ch.model;
		r.object = ch.object;
		if (ch.system_fingerprint)
			r.fingerprint = ch.system_fingerprint;
		for (const c of ch.choices ?? []) {
			if (c.delta?.role)
				r.role = c.delta.role;
			if (c.delta?.content)
				r.text += c.delta.content;
			if (c.finish_reason)
				r.finish_reason = c.finish_reason;
		}
		if (ch.usage)
			r.usage = chatUsage(ch.usage);
	}
	return r;
}

function respText(data) {
	if (typeof data.output_text === 'string')
		return data.output_text;
	return (data.output ?? []).flatMap((o) => o.content ?? [])
	    .filter((c) => c.type === 'output_text').map((c) => c.text).join('');
}

function respResult(data, m, chunks) {
	return { ...m, api: 'responses', id: data.id, model: data.model,
	    object: data.object, text: respText(data), role: 'assistant',
	    finish_reason: data.status,
	    fingerprint: data.system_fingerprint ?? data.metadata?.cluster_id ??
	    null, usage: respUsage(data.usage), chunks };
}

async function responses(params, headers) {
	if (!params.stream) {
		const { data, response } = await client.responses
		    .create(params, { headers }).withResponse();
		return respResult(data, meta(response), 0);
	}
	const { data: stream, response } = await client.responses
	    .create(params, { headers }).withResponse();
	let done = null, chunks = 0, text = '';
	for await (const ev of stream) {
		chunks++;
		if (ev.type === 'response.output_text.delta')
			text += ev.delta;
		if (ev.type === 'response.completed' ||
		    ev.type === 'response.incomplete')
			done = ev.response;
	}
	if (done === null)
		throw new Error('the stream ended without response.completed');
	const r = respResult(done, meta(response), chunks);
	r.streamed_text = text;
	return r;
}

async function turn(cmd) {
	const s = sessions.get(cmd.session) ?? [];
	const api = cmd.api ?? 'chat';
	const model = cmd.model ?? 'acme/dummy-model';
	s.push({ role: 'user', content: cmd.content });
	const params = { model, prompt_cache_key: cmd.session,
	    stream: Boolean(cmd.stream) };
	let r;
	if (api === 'chat') {
		if (cmd.max_tokens)
			params.max_tokens = cmd.max_tokens;
		r = await chat({ ...params, messages: s }, cmd.headers);
	} else {
		if (cmd.max_tokens)
			params.max_output_tokens = cmd.max_tokens;
		r = await responses({ ...params, input: s }, cmd.headers);
	}
	s.push({ role: 'assistant', content: r.text });
	sessions.set(cmd.session, s);
	r.turn = s.length / 2;
	return r;
}

async function run(cmd) {
	const { op, headers, ...params } = cmd;
	switch (op) {
	case 'chat':
		return chat(params, headers);
	case 'responses':
		return responses(params, headers);
	case 'turn':
		return turn(cmd);
	case 'models': {
		const page = await client.models.list();
		return { api: 'models', ids: page.data.map((m) => m.id) };
	}
	default:
		throw new Error(`unknown op '${op}'`);
	}
}

const rl = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of rl) {
	if (line.trim() === '')
		continue;
	const t0 = performance.now();
	let out;
	try {
		out = { ok: true, ...(await run(JSON.parse(line))) };
	} catch (e) {
		out = { ok: false, status: e.status ?? null,
		    code: e.code ?? e.error?.code ?? null,
		    type: e.type ?? e.error?.type ?? null,
		    error: String(e.message ?? e) };
	}
	out.ms = Math.round(performance.now() - t0);
	process.stdout.write(JSON.stringify(out) + '\n');
}
