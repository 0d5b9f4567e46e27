// The status page's and the devices page's shared part of their script (hubd.web.page puts it inside each one's).

// Every string from hubd goes in as text (textContent), never as HTML.
function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = String(value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function badge(text, kind) { return el("span", {class: "badge " + (kind || ""), text: text}); }

// A table row whose cells (text or nodes) each carry their column's name, for the cards on a phone.
function row(headers, cells, props) {
  return el("tr", props, ...cells.map((cell, i) => el("td", {"data-label": headers[i]}, el("div", {class: "cell"}, cell))));
}

// A table that collapses into cards on a phone, of its rows (`row`).
function cards(headers, rows) {
  const head = el("thead", null, el("tr", null, ...headers.map((h) => el("th", {scope: "col", text: h}))));
  return el("div", {class: "scroll"}, el("table", {class: "cards"}, head, el("tbody", null, ...rows)));
}

// The same, of rows given as arrays of cells.
function table(headers, rows) { return cards(headers, rows.map((cells) => row(headers, cells))); }

// Calls `step` (async: it asks for the page's data and draws it, and answers how many ms until the next call) after
// `firstMs`, and so on, but never while the page is hidden: it pauses there, and goes on at once when the page shows
// again. Returns what calls it now (after a change), which also starts the wait for the next call afresh.
function polling(step, firstMs) {
  let timer = 0;
  async function next() {
    clearTimeout(timer);
    if (document.hidden) return;  // resumed by visibilitychange
    const ms = await step();
    clearTimeout(timer);  // one timer, whoever called meanwhile
    timer = setTimeout(next, ms);
  }
  document.addEventListener("visibilitychange", () => { if (!document.hidden) next(); });
  timer = setTimeout(next, firstMs);
  return next;
}
