// Renders chat templates with Hugging Face's JavaScript Jinja (@huggingface/jinja), the peer of
// package chat's engine. Input on stdin: a JSON array of {template, context}; output on stdout: a
// JSON array of {out} or {err}, in order.
import { Template } from "@huggingface/jinja";

let input = "";
for await (const chunk of process.stdin) input += chunk;
const cases = JSON.parse(input);
const results = cases.map(({ template, context }) => {
	try {
		return { out: new Template(template).render(context) };
	} catch (e) {
		return { err: String(e && e.message ? e.message : e) };
	}
});
process.stdout.write(JSON.stringify(results));
