// Send one message, serve the agent's `lookup_order` calls, print the answer.
//
//   npm install && npm run quickstart   # in examples/typescript; HOLDFAST_URL, HOLDFAST_API_KEY, HOLDFAST_AGENT set

import { Holdfast } from "holdfast-sdk";

const client = new Holdfast(); // HOLDFAST_URL and HOLDFAST_API_KEY
const stream = client.textStream(process.env.HOLDFAST_AGENT!, "Where is order 1001?", {
  tools: { lookup_order: (input: { order?: number }) => ({ order: input.order ?? null, status: "shipped", carrier: "DHL" }) },
});
for await (const chunk of stream) {
  if (chunk.restart) process.stdout.write("\n[the model call was retried; again:]\n");
  process.stdout.write(chunk.text);
}
console.log(`\nanswer: ${stream.result!.text}`);
