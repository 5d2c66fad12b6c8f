// petrel dashboard: draws the state from /api/state (live) or PETREL_DATA (static report)
// with plain SVG. No external resources.
"use strict";
(function () {
  const NS = "http://www.w3.org/2000/svg";
  const COLORS = ["#3760b0", "#d0702a", "#2a8a4a", "#b03070", "#7050b0", "#208090",
    "#a08020", "#606060", "#c04040", "#40a0c0"];

  function el(name, attrs, text) {
    const e = document.createElementNS(NS, name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function clear(svg) { while (svg.firstChild) svg.removeChild(svg.firstChild); }
  function empty(svg, msg) {
    clear(svg);
    const vb = svg.viewBox.baseVal;
    svg.appendChild(el("text", { x: vb.width / 2, y: vb.height / 2, "text-anchor": "middle", class: "empty" }, msg));
  }
  function bytes(v) {
    if (v === null || v === undefined) return "";
    const u = ["B", "KB", "MB", "GB"];
    let i = 0;
    while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
    return (i ? v.toFixed(1) : Math.round(v)) + " " + u[i];
  }
  function num(v) {
    if (!isFinite(v)) return String(v);
    const a = Math.abs(v);
    if (a !== 0 && (a < 1e-3 || a >= 1e5)) return v.toExponential(2);
    return (+v.toPrecision(4)).toString();
  }

  // Axes for x in [x0,x1], y in [y0,y1] into box (l,t,w,h); returns mappers.
  function axes(svg, l, t, w, h, x0, x1, y0, y1, xl, yl, noXTicks) {
    if (x1 <= x0) x1 = x0 + 1;
    if (y1 <= y0) y1 = y0 + 1;
    const X = x => l + (x - x0) / (x1 - x0) * w;
    const Y = y => t + h - (y - y0) / (y1 - y0) * h;
    for (let i = 0; i <= 4; i++) {
      const y = y0 + (y1 - y0) * i / 4;
      svg.appendChild(el("line", { x1: l, x2: l + w, y1: Y(y), y2: Y(y), class: "grid" }));
      svg.appendChild(el("text", { x: l - 4, y: Y(y) + 3, "text-anchor": "end", class: "label" }, num(y)));
    }
    for (let i = 0; i <= (noXTicks ? -1 : 4); i++) {
      const x = x0 + (x1 - x0) * i / 4;
      svg.appendChild(el("text", { x: X(x), y: t + h + 12, "text-anchor": "middle", class: "label" }, num(x)));
    }
    svg.appendChild(el("line", { x1: l, x2: l, y1: t, y2: t + h, class: "axis" }));
    svg.appendChild(el("line", { x1: l, x2: l + w, y1: t + h, y2: t + h, class: "axis" }));
    if (xl) svg.appendChild(el("text", { x: l + w, y: t + h + 24, "text-anchor": "end", class: "label" }, xl));
    if (yl) svg.appendChild(el("text", { x: l, y: t - 4, class: "label" }, yl));
    return [X, Y];
  }

  function drawNodes(s) {
    const body = document.querySelector("#nodes tbody");
    body.innerHTML = "";
    for (const [name, n] of Object.entries(s.nodes)) {
      const tr = document.createElement("tr");
      tr.className = "node";
      tr.dataset.node = name;
      tr.dataset.state = n.state;
      const cells = [name, n.roles.join(", "), n.state, bytes(n.sent_bps) + "/s",
        bytes(n.received_bps) + "/s", bytes(n.outbox_bytes), String(n.mailbox_depth),
        bytes(n.rss_bytes), n.cpu === null || n.cpu === undefined ? "" : (100 * n.cpu).toFixed(0) + "%"];
      cells.forEach((c, i) => {
        const td = document.createElement("td");
        td.textContent = c;
        if (i === 2) td.className = "state-" + n.state;
        if (i === 2 && n.error) td.title = n.error;
        tr.appendChild(td);
      });
      body.appendChild(tr);
    }
  }

  function drawLinks(s) {
    const svg = document.getElementById("links");
    const names = Object.keys(s.nodes);
    if (names.length === 0) return empty(svg, "no nodes yet");
    clear(svg);
    const cx = 210, cy = 150, r = 110;
    const pos = {};
    names.forEach((n, i) => {
      const a = -Math.PI / 2 + 2 * Math.PI * i / names.length;
      pos[n] = [cx + r * Math.cos(a), cy + r * Math.sin(a)];
    });
    const max = Math.max(1, ...s.links.map(l => l.bps));
    for (const l of s.links) {
      const a = pos[l.from], b = pos[l.to];
      if (!a || !b) continue;
      // Offset each direction sideways so a->b and b->a do not overlap.
      const dx = b[0] - a[0], dy = b[1] - a[1], len = Math.hypot(dx, dy) || 1;
      const ox = -dy / len * 4, oy = dx / len * 4;
      const w = 0.5 + 7 * l.bps / max;
      svg.appendChild(el("line", { x1: a[0] + ox, y1: a[1] + oy, x2: b[0] + ox, y2: b[1] + oy,
        stroke: "#3760b0", "stroke-opacity": 0.25 + 0.6 * l.bps / max, "stroke-width": w },
      ));
      const t = el("title", {}, l.from + " -> " + l.to + ": " + bytes(l.bps) + "/s");
      svg.lastChild.appendChild(t);
      if (l.bps > 0.05 * max) {
        svg.appendChild(el("text", { x: (a[0] + b[0]) / 2 + 3 * ox, y: (a[1] + b[1]) / 2 + 3 * oy,
          "text-anchor": "middle", class: "label" }, bytes(l.bps) + "/s"));
      }
    }
    for (const n of names) {
      const [x, y] = pos[n];
      const st = s.nodes[n].state;
      const fill = st === "up" ? "#2a8a4a" : st === "starting" || st === "exited" ? "#aaa" : "#c03020";
      svg.appendChild(el("circle", { cx: x, cy: y, r: 9, fill: fill }));
      svg.appendChild(el("text", { x: x, y: y - 13, "text-anchor": "middle", class: "label" }, n));
    }
  }

  function drawCurve(s) {
    const svg = document.getElementById("curve");
    const keys = Object.keys(s.curves);
    let total = 0;
    keys.forEach(k => total += s.curves[k].length);
    svg.dataset.points = String(total);
    document.getElementById("curve-label").textContent = keys.join(", ");
    if (total === 0) return empty(svg, "no history points yet");
    clear(svg);
    // One panel per metric (objective and loss scales differ): the first curve is drawn
    // large; every curve is normalised to its own range when there are several metrics.
    const all = keys.map(k => s.curves[k]);
    const xs = all.flat().map(p => p.t);
    const several = keys.length > 1;
    const ys = several ? [0, 1] : all[0].map(p => p.v);
    const [X, Y] = axes(svg, 52, 16, 350, 244, Math.min(...xs), Math.max(...xs),
      Math.min(...ys), Math.max(...ys), "job time (s)", several ? "normalised" : keys[0]);
    keys.forEach((k, i) => {
      const pts = s.curves[k];
      const lo = Math.min(...pts.map(p => p.v)), hi = Math.max(...pts.map(p => p.v));
      const norm = v => several ? (hi > lo ? (v - lo) / (hi - lo) : 0.5) : v;
      const d = pts.map((p, j) => (j ? "L" : "M") + X(p.t).toFixed(1) + " " + Y(norm(p.v)).toFixed(1)).join(" ");
      svg.appendChild(el("path", { d: d, fill: "none", stroke: COLORS[i % COLORS.length], "stroke-width": 1.8 }));
      for (const p of pts.length <= 60 ? pts : []) {
        svg.appendChild(el("circle", { cx: X(p.t), cy: Y(norm(p.v)), r: 2, fill: COLORS[i % COLORS.length] }));
      }
      const last = pts[pts.length - 1];
      svg.appendChild(el("text", { x: 60, y: 30 + 12 * i, class: "label", fill: COLORS[i % COLORS.length] },
        k + " = " + num(last.v)));
    });
  }

  function drawStaleness(s) {
    const svg = document.getElementById("staleness");
    const tables = Object.keys(s.staleness);
    document.getElementById("staleness-section").hidden = false;
    if (tables.length === 0) return empty(svg, "no parameter-server reads");
    clear(svg);
    const buckets = s.staleness[tables[0]].map(b => b[0]);
    const max = Math.max(1, ...tables.flatMap(t => s.staleness[t].map(b => b[1])));
    const [, Y] = axes(svg, 52, 14, 350, 170, 0, buckets.length, 0, max, "", "reads", true);
    const bw = 350 / buckets.length / tables.length;
    tables.forEach((t, ti) => {
      s.staleness[t].forEach((b, i) => {
        const x = 52 + 350 * i / buckets.length + ti * bw;
        svg.appendChild(el("rect", { x: x + 1, y: Y(b[1]), width: Math.max(1, bw - 2), height: 184 - Y(b[1]),
          fill: COLORS[ti % COLORS.length] }));
        if (ti === 0) {
          const le = b[0] === null || !isFinite(b[0]) ? "more" : "<=" + b[0];
          svg.appendChild(el("text", { x: x + bw * tables.length / 2, y: 198, "text-anchor": "middle", class: "label" }, le));
        }
      });
      svg.appendChild(el("text", { x: 350, y: 24 + 12 * ti, class: "label", fill: COLORS[ti % COLORS.length] }, "table " + t));
    });
  }

  function drawRounds(s) {
    const svg = document.getElementById("rounds");
    if (s.rounds.length === 0) return empty(svg, "no STRADS rounds");
    clear(svg);
    const t0 = Math.min(...s.rounds.map(r => r.t0)), t1 = Math.max(...s.rounds.map(r => r.t1));
    const rate = r => r.rounds / Math.max(1e-9, r.t1 - r.t0);
    const maxRate = Math.max(...s.rounds.map(rate));
    const [X, Y] = axes(svg, 52, 14, 330, 170, t0, t1, 0, maxRate, "dashboard time (s)", "rounds/s");
    for (const r of s.rounds) {
      svg.appendChild(el("rect", { x: X(r.t0), y: Y(rate(r)), width: Math.max(1, X(r.t1) - X(r.t0) - 1),
        height: 184 - Y(rate(r)), fill: "#d0702a", "fill-opacity": 0.6 }));
      svg.lastChild.appendChild(el("title", {}, r.node + ": " + r.rounds + " rounds, mean latency " +
        num(r.mean_latency_s * 1000) + " ms, " + r.in_flight + " in flight, " + r.rejections + " filtered"));
    }
    const maxLat = Math.max(1e-9, ...s.rounds.map(r => r.mean_latency_s));
    const d = s.rounds.map((r, i) => (i ? "L" : "M") + X((r.t0 + r.t1) / 2).toFixed(1) + " " +
      (184 - 170 * r.mean_latency_s / maxLat).toFixed(1)).join(" ");
    svg.appendChild(el("path", { d: d, fill: "none", stroke: "#3760b0", "stroke-width": 1.5 }));
    svg.appendChild(el("text", { x: 388, y: 20, "text-anchor": "end", class: "label", fill: "#3760b0" },
      "latency max " + num(maxLat * 1000) + " ms"));
  }

  function drawSlices(s) {
    const svg = document.getElementById("slices");
    if (s.slices.length === 0) return empty(svg, "no P3 slices");
    clear(svg);
    const workers = [...new Set(s.slices.map(x => x.node))].sort();
    const t0 = Math.min(...s.slices.map(x => x.t0)), t1 = Math.max(...s.slices.map(x => x.t1));
    const layers = [...new Set(s.slices.flatMap(x => x.layers.map(l => l[0])))].sort((a, b) => a - b);
    const l = 60, w = 700, rowH = Math.min(90, 190 / workers.length);
    const X = t => l + (t - t0) / Math.max(1e-9, t1 - t0) * w;
    workers.forEach((wk, wi) => {
      const top = 10 + wi * rowH, h = rowH - 14;
      const spans = s.slices.filter(x => x.node === wk);
      const max = Math.max(1, ...spans.map(x => x.layers.reduce((a, b) => a + b[1], 0)));
      svg.appendChild(el("text", { x: l - 6, y: top + h / 2, "text-anchor": "end", class: "label" }, wk));
      for (const sp of spans) {
        let y = top + h;
        for (const [layer, b] of sp.layers) {
          const bh = h * b / max;
          y -= bh;
          const c = COLORS[layers.indexOf(layer) % COLORS.length];
          svg.appendChild(el("rect", { x: X(sp.t0), y: y, width: Math.max(1, X(sp.t1) - X(sp.t0) - 1), height: bh, fill: c }));
          svg.lastChild.appendChild(el("title", {}, wk + " layer " + layer + ": " + bytes(b) + " in " +
            num(sp.t1 - sp.t0) + " s; wire busy " + (100 * sp.busy).toFixed(0) + "%"));
        }
      }
      svg.appendChild(el("line", { x1: l, x2: l + w, y1: top + h, y2: top + h, class: "axis" }));
    });
    svg.appendChild(el("text", { x: l, y: 236, class: "label" }, num(t0) + " s"));
    svg.appendChild(el("text", { x: l + w, y: 236, "text-anchor": "end", class: "label" }, num(t1) + " s"));
    layers.slice(0, 12).forEach((layer, i) => {
      svg.appendChild(el("rect", { x: l + w + 10, y: 10 + 14 * i, width: 10, height: 10, fill: COLORS[i % COLORS.length] }));
      svg.appendChild(el("text", { x: l + w + 24, y: 19 + 14 * i, class: "label" }, "layer " + layer));
    });
  }

  function draw(s) {
    document.getElementById("title").textContent = "petrel: " + s.title;
    document.title = "petrel: " + s.title;
    document.getElementById("clock").textContent = num(s.now_s) + " s";
    const status = document.getElementById("status");
    status.textContent = s.finished ? "finished (static report)" : "live";
    status.className = "badge " + (s.finished ? "finished" : "live");
    document.body.dataset.nodes = String(Object.keys(s.nodes).length);
    for (const f of [drawNodes, drawLinks, drawCurve, drawStaleness, drawRounds, drawSlices]) {
      try { f(s); } catch (e) { console.error(f.name, e); }
    }
  }

  if (PETREL_DATA) {
    draw(PETREL_DATA);
    return;
  }
  async function poll() {
    try {
      const r = await fetch("api/state", { cache: "no-store" });
      if (!r.ok) throw new Error("HTTP " + r.status);
      draw(await r.json());
    } catch (e) {
      const status = document.getElementById("status");
      status.textContent = "no answer (" + e.message + ")";
      status.className = "badge stale";
    }
  }
  poll();
  setInterval(poll, 1000);
})();
