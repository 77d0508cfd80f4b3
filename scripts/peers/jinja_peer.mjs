// Renders chat templates with Hugging Face's JavaScript Jinja (@huggingface/jinja), the peer of
// package chat's engine. Input on stdin: a JSON array of {template, context}; output on stdout: a
// JSON array of {out} or {err}, in order. With JINJA_PEER_REPEAT=N each case is parsed once and
// rendered N more times, and its result carries ns, the mean nanoseconds per render.
import { Template } from "@huggingface/jinja";

const repeat = Number(process.env.JINJA_PEER_REPEAT || 0);

let input = "";
for await (const chunk of process.stdin) input += chunk;
const cases = JSON.parse(input);
const results = cases.map(({ template, context }) => {
	try {
		const t = new Template(template);
		const out = t.render(context);
		if (repeat > 0) {
			const start = process.hrtime.bigint();
			for (let i = 0; i < repeat; i++) t.render(context);
			return { out, ns: Number(process.hrtime.bigint() - start) / repeat };
		}
		return { out };
	} catch (e) {
		return { err: String(e && e.message ? e.message : e) };
	}
});
process.stdout.write(JSON.stringify(results));
