// Building DOM from untrusted text: every string goes in as textContent,
// never as HTML. Markdown is a small safe subset rendered to elements:
// paragraphs, headings, lists, fenced code, inline code, emphasis and links
// restricted to http(s).

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") node.className = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// Config keys whose values are secrets: shown as ***.
const SECRET_KEY = /(secret|token|password|api[_-]?key|authorization|headers)/i;

export function maskSecrets(value) {
  if (Array.isArray(value)) return value.map(maskSecrets);
  if (value && typeof value === "object") {
    const out = {};
    for (const [k, v] of Object.entries(value)) out[k] = SECRET_KEY.test(k) ? "***" : maskSecrets(v);
    return out;
  }
  return value;
}

export function json(value) {
  return el("pre", {}, JSON.stringify(value, null, 2));
}

// A collapsible JSON viewer named by `summary` (so a screen reader tells
// one disclosure from the next), with a button that copies the JSON.
export function folded(summary, value) {
  const text = JSON.stringify(value, null, 2) ?? "null";
  const copied = el("span", { class: "meta", role: "status" });
  const copy = el("button", { type: "button", class: "copy", "aria-label": `Copy ${summary}`, onclick: async () => {
    try { await navigator.clipboard.writeText(text); copied.textContent = "copied"; }
    catch { copied.textContent = "copy refused by the browser"; }
  } }, "Copy");
  return el("details", { class: "json" }, el("summary", {}, summary), el("div", { class: "json-tools" }, copy, " ", copied), el("pre", {}, text));
}

// A program's output as plain text for a terminal-like <pre>: escape
// sequences (colours, cursor moves, titles) are removed, a carriage return
// ends a line, and any other control character shows as U+FFFD. The result
// still goes in as textContent: output is never markup.
const ESCAPE_SEQUENCE = /\u001b(?:\[[0-?]*[ -\/]*[@-~]|\][^\u0007\u001b]*(?:\u0007|\u001b\\)?|[@-Z\\-_])/g;
const CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/g;
export function terminalText(text) {
  return String(text).replace(ESCAPE_SEQUENCE, "").replace(/\r\n?/g, "\n").replace(CONTROL, "\ufffd");
}

// "3 min ago" for a time in the past (the exact time is the caller's title).
export function ago(time, now = Date.now()) {
  const seconds = Math.max(0, Math.round((now - new Date(time).getTime()) / 1000));
  if (seconds < 60) return `${seconds} s ago`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ago`;
  return `${Math.floor(seconds / 86400)} d ago`;
}

// A length of time: "850 ms", "12.3 s", "4 min 5 s", "2 h 3 min".
export function duration(ms) {
  if (!Number.isFinite(ms) || ms < 0) return "";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  const seconds = Math.round(ms / 1000);
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ${seconds % 60} s`;
  return `${Math.floor(seconds / 3600)} h ${Math.floor((seconds % 3600) / 60)} min`;
}

// "1,500 tokens · $0.0105" for a usage ({input_tokens, output_tokens,
// cost_usd}); no cost when the model has no price.
export function usageText(usage) {
  if (!usage) return "";
  const tokens = (usage.input_tokens ?? 0) + (usage.output_tokens ?? 0);
  const cost = usage.cost_usd === null || usage.cost_usd === undefined ? "" : ` · $${Number(usage.cost_usd).toFixed(4)}`;
  return `${tokens.toLocaleString("en-US")} tokens${cost}`;
}

// A finder of the next match of `pattern` at or after an index. It
// remembers its last answer, so a left-to-right scan whose queries never go
// back searches each stretch of the text once: linear time in all, where a
// regular expression retried at every position would be quadratic on text
// full of `[` or `*` without their closing marks.
function finder(text, pattern) {
  const re = new RegExp(pattern.source, "g");
  let searchedFrom = Infinity, found = -1;
  return (from) => {
    if (from >= searchedFrom && (found === -1 || found >= from)) return found;
    re.lastIndex = from;
    const match = re.exec(text);
    searchedFrom = from;
    found = match ? match.index : -1;
    return found;
  };
}

// Inline markdown, scanned once left to right: `code`, **strong**, *em* and
// [label](http(s) URL); anything else, unclosed marks included, is text.
function inline(text) {
  const out = [];
  const next = {
    tick: finder(text, /`/),
    star: finder(text, /\*/),
    bracket: finder(text, /\]/),
    paren: finder(text, /\)/),
    space: finder(text, /\s/),
  };
  let plain = 0, i = 0;
  const token = (end, node) => {
    if (i > plain) out.push(text.slice(plain, i));
    out.push(node);
    i = plain = end;
  };
  while (i < text.length) {
    const c = text[i];
    if (c === "`") {
      const close = next.tick(i + 1);
      if (close > i + 1) { token(close + 1, el("code", {}, text.slice(i + 1, close))); continue; }
    } else if (c === "*" && text[i + 1] === "*") {
      const close = next.star(i + 2);
      if (close > i + 2 && text[close + 1] === "*") { token(close + 2, el("strong", {}, text.slice(i + 2, close))); continue; }
    } else if (c === "*") {
      const close = next.star(i + 1);
      if (close > i + 1) { token(close + 1, el("em", {}, text.slice(i + 1, close))); continue; }
    } else if (c === "[") {
      const close = next.bracket(i + 1);
      if (close > i + 1 && text[close + 1] === "(") {
        const end = next.paren(close + 2);
        const space = next.space(close + 2);
        if (end > close + 2 && (space === -1 || space > end)) {
          const label = text.slice(i + 1, close);
          const href = text.slice(close + 2, end);
          const node = /^https?:\/\//i.test(href)
            ? el("a", { href, rel: "noopener noreferrer nofollow", target: "_blank" }, label)
            : text.slice(i, end + 1);
          token(end + 1, node);
          continue;
        }
      }
    }
    i++;
  }
  if (plain < text.length) out.push(text.slice(plain));
  return out;
}

export function markdown(source) {
  const root = el("div", { class: "markdown" });
  const lines = String(source).split(/\r?\n/);
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (line.startsWith("```")) {
      const code = [];
      i++;
      while (i < lines.length && !lines[i].startsWith("```")) code.push(lines[i++]);
      i++;
      root.append(el("pre", {}, el("code", {}, code.join("\n"))));
    } else if (/^#{1,6} /.test(line)) {
      const level = Math.min(line.indexOf(" ") + 2, 6);
      root.append(el(`h${level}`, {}, inline(line.replace(/^#+ /, ""))));
      i++;
    } else if (/^\s*([-*]|\d+\.) /.test(line)) {
      const ordered = /^\s*\d+\. /.test(line);
      const list = el(ordered ? "ol" : "ul");
      while (i < lines.length && /^\s*([-*]|\d+\.) /.test(lines[i])) {
        list.append(el("li", {}, inline(lines[i].replace(/^\s*([-*]|\d+\.) /, ""))));
        i++;
      }
      root.append(list);
    } else if (line.trim() === "") {
      i++;
    } else {
      const para = [];
      while (i < lines.length && lines[i].trim() !== "" && !lines[i].startsWith("```") && !/^#{1,6} /.test(lines[i])) para.push(lines[i++]);
      root.append(el("p", {}, inline(para.join(" "))));
    }
  }
  return root;
}
