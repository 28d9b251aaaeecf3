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

export function folded(summary, value) {
  return el("details", {}, el("summary", {}, summary), json(value));
}

function inline(text) {
  const out = [];
  const pattern = /(`[^`]+`)|(\*\*[^*]+\*\*)|(\*[^*]+\*)|(\[[^\]]+\]\([^)\s]+\))/g;
  let last = 0, match;
  while ((match = pattern.exec(text)) !== null) {
    if (match.index > last) out.push(text.slice(last, match.index));
    const token = match[0];
    if (match[1]) out.push(el("code", {}, token.slice(1, -1)));
    else if (match[2]) out.push(el("strong", {}, token.slice(2, -2)));
    else if (match[3]) out.push(el("em", {}, token.slice(1, -1)));
    else {
      const label = token.slice(1, token.indexOf("]"));
      const href = token.slice(token.indexOf("](") + 2, -1);
      if (/^https?:\/\//i.test(href)) out.push(el("a", { href, rel: "noopener noreferrer nofollow", target: "_blank" }, label));
      else out.push(token);
    }
    last = match.index + token.length;
  }
  if (last < text.length) out.push(text.slice(last));
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
