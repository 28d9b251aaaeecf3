// A reader of text/event-stream over fetch(): EventSource cannot send an
// Authorization header, and the API key must never go in a URL.
// It resumes after a dropped connection from the last seq it saw
// (Last-Event-ID) and hands each saved event on once; live messages (answer
// deltas, a running command's output) have no seq and are handed on as
// they come.

export function streamEvents({ url, key, afterSeq, onEvent, onDelta, onOutput, onStatus }) {
  let lastSeq = afterSeq;
  let stopped = false;
  let controller = null;
  let retryMs = 500;

  async function connectOnce() {
    controller = new AbortController();
    const headers = { Authorization: `Bearer ${key}`, Accept: "text/event-stream" };
    headers["Last-Event-ID"] = String(lastSeq);
    const response = await fetch(url, { headers, signal: controller.signal, cache: "no-store" });
    if (!response.ok || !response.body) throw new Error(`stream: HTTP ${response.status}`);
    onStatus("live");
    retryMs = 500;
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let end;
      while ((end = buffer.search(/\r?\n\r?\n/)) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end).replace(/^\r?\n\r?\n/, "");
        dispatch(block);
      }
    }
  }

  function dispatch(block) {
    let id = null, type = "message", data = [];
    for (const line of block.split(/\r?\n/)) {
      if (line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "id") id = value;
      else if (field === "event") type = value;
      else if (field === "data") data.push(value);
    }
    if (data.length === 0) return;
    let payload;
    try { payload = JSON.parse(data.join("\n")); } catch { return; }
    if (type === "delta") { onDelta(payload); return; }
    if (type === "command_output") { onOutput?.(payload); return; }
    const seq = id === null ? NaN : Number(id);
    if (!Number.isFinite(seq) || seq <= lastSeq) return; // a duplicate after a resume
    lastSeq = seq;
    onEvent(payload);
  }

  (async () => {
    while (!stopped) {
      try { await connectOnce(); } catch (error) { if (stopped) return; onStatus(`reconnecting (${error.message})`); }
      if (stopped) return;
      onStatus("reconnecting");
      await new Promise((resolve) => setTimeout(resolve, retryMs));
      retryMs = Math.min(retryMs * 2, 10000);
    }
  })();

  return { stop() { stopped = true; if (controller) controller.abort(); }, lastSeq: () => lastSeq };
}
