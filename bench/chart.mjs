/**
 * The benchmark's chart as plain SVG text (no package, no image service): two panels against key
 * count (log scale), requests/s and server CPU per operation, one line per target and pipeline
 * (pipeline 1 dashed). `series`: [{label, color, dashed, points: [{x, rps, cpu}]}].
 */
const W = 460;
const H = 300;
const M = { left: 62, right: 14, top: 34, bottom: 44 };

const esc = (s) => String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
const keyLabel = (k) => (k >= 1e6 ? `${k / 1e6}M` : k >= 1e3 ? `${k / 1e3}k` : String(k));

/** A "nice" upper bound and tick step for values up to `max`. */
function niceScale(max) {
  if (!(max > 0)) return { top: 1, step: 0.2 };
  const raw = max / 5;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((f) => f * mag).find((s) => s >= raw);
  return { top: Math.ceil(max / step) * step, step };
}

function fmtTick(v, unit) {
  if (unit === 'rps') return v >= 1e6 ? `${+(v / 1e6).toFixed(2)}M` : v >= 1e3 ? `${+(v / 1e3).toFixed(0)}k` : String(v);
  return +v.toFixed(2) + '';
}

function panel(x0, title, unit, series, xs) {
  const values = series.flatMap((s) => s.points.map((p) => p[unit]));
  const { top, step } = niceScale(Math.max(...values));
  const pw = W - M.left - M.right;
  const ph = H - M.top - M.bottom;
  const lx = Math.log10(Math.min(...xs));
  const hx = Math.log10(Math.max(...xs));
  const px = (x) => x0 + M.left + (hx === lx ? pw / 2 : ((Math.log10(x) - lx) / (hx - lx)) * pw);
  const py = (y) => M.top + ph - (y / top) * ph;
  const out = [];
  out.push(`<text x="${x0 + M.left + pw / 2}" y="${M.top - 12}" text-anchor="middle" font-weight="bold">${esc(title)}</text>`);
  for (let v = 0; v <= top + step / 2; v += step) {
    out.push(`<line x1="${x0 + M.left}" x2="${x0 + M.left + pw}" y1="${py(v).toFixed(1)}" y2="${py(v).toFixed(1)}" stroke="#ddd"/>`);
    out.push(`<text x="${x0 + M.left - 6}" y="${(py(v) + 4).toFixed(1)}" text-anchor="end">${fmtTick(v, unit)}</text>`);
  }
  for (const x of xs) {
    out.push(`<line x1="${px(x).toFixed(1)}" x2="${px(x).toFixed(1)}" y1="${M.top}" y2="${M.top + ph}" stroke="#eee"/>`);
    out.push(`<text x="${px(x).toFixed(1)}" y="${M.top + ph + 16}" text-anchor="middle">${keyLabel(x)}</text>`);
  }
  out.push(`<text x="${x0 + M.left + pw / 2}" y="${H - 8}" text-anchor="middle">keys (log scale)</text>`);
  out.push(`<rect x="${x0 + M.left}" y="${M.top}" width="${pw}" height="${ph}" fill="none" stroke="#999"/>`);
  for (const s of series) {
    const pts = s.points.map((p) => `${px(p.x).toFixed(1)},${py(p[unit]).toFixed(1)}`).join(' ');
    out.push(`<polyline points="${pts}" fill="none" stroke="${s.color}" stroke-width="2"${s.dashed ? ' stroke-dasharray="6 4"' : ''}/>`);
    for (const p of s.points) out.push(`<circle cx="${px(p.x).toFixed(1)}" cy="${py(p[unit]).toFixed(1)}" r="3" fill="${s.color}"><title>${esc(`${s.label}, ${keyLabel(p.x)} keys: ${unit === 'rps' ? `${Math.round(p.rps).toLocaleString('en-US')} requests/s` : `${p.cpu.toFixed(3)} µs CPU/op`}`)}</title></circle>`);
  }
  return out.join('\n');
}

export function svgChart({ title, series }) {
  const xs = [...new Set(series.flatMap((s) => s.points.map((p) => p.x)))].sort((a, b) => a - b);
  const legendRows = Math.ceil(series.length / 2);
  const height = H + 30 + legendRows * 18;
  const width = 2 * W;
  const out = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="11">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="${width / 2}" y="14" text-anchor="middle" font-size="12">${esc(title)}</text>`,
    panel(0, 'requests/s (higher is better)', 'rps', series, xs),
    panel(W, 'server CPU µs per operation (lower is better)', 'cpu', series, xs),
  ];
  series.forEach((s, i) => {
    const x = 40 + (i % 2) * W;
    const y = H + 20 + Math.floor(i / 2) * 18;
    out.push(`<line x1="${x}" x2="${x + 28}" y1="${y - 4}" y2="${y - 4}" stroke="${s.color}" stroke-width="2"${s.dashed ? ' stroke-dasharray="6 4"' : ''}/>`);
    out.push(`<text x="${x + 36}" y="${y}">${esc(s.label)}</text>`);
  });
  out.push('</svg>');
  return out.join('\n') + '\n';
}
