/**
 * A strict reader of the Prometheus text exposition format (version 0.0.4), for the tests: every
 * line must be a HELP, a TYPE or a sample of a family declared before it, so a malformed line or a
 * sample outside its family fails the test that scrapes.
 */
export interface PromSample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface Exposition {
  /** Family name → its TYPE. */
  types: Map<string, string>;
  samples: PromSample[];
}

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(,|$)/y;

export function parseExposition(text: string): Exposition {
  if (!text.endsWith('\n')) throw new Error('the exposition must end with a newline');
  const types = new Map<string, string>();
  const samples: PromSample[] = [];
  for (const line of text.slice(0, -1).split('\n')) {
    if (line.startsWith('# HELP ')) continue;
    if (line.startsWith('# TYPE ')) {
      const [name, type] = line.slice(7).split(' ');
      if (!['counter', 'gauge', 'histogram', 'summary', 'untyped'].includes(type)) throw new Error(`bad TYPE line: ${line}`);
      if (types.has(name)) throw new Error(`family declared twice: ${name}`);
      types.set(name, type);
      continue;
    }
    const m = SAMPLE.exec(line);
    if (m === null) throw new Error(`not a sample line: ${JSON.stringify(line)}`);
    const [, name, labelText, valueText] = m;
    const labels: Record<string, string> = {};
    if (labelText !== undefined && labelText !== '') {
      LABEL.lastIndex = 0;
      let end = 0;
      let l: RegExpExecArray | null;
      while (end < labelText.length && (l = LABEL.exec(labelText)) !== null) {
        labels[l[1]] = l[2].replace(/\\(.)/g, (_m, c: string) => (c === 'n' ? '\n' : c));
        end = LABEL.lastIndex;
      }
      if (end !== labelText.length) throw new Error(`bad labels: ${line}`);
    }
    const value = valueText === '+Inf' ? Infinity : valueText === '-Inf' ? -Infinity : Number(valueText);
    if (Number.isNaN(value) && valueText !== 'NaN') throw new Error(`bad value: ${line}`);
    const family = familyOf(name, types);
    if (family === null) throw new Error(`sample outside any declared family: ${line}`);
    samples.push({ name, labels, value });
  }
  return { types, samples };
}

function familyOf(name: string, types: Map<string, string>): string | null {
  if (types.has(name)) return name;
  for (const suffix of ['_bucket', '_sum', '_count']) {
    if (name.endsWith(suffix)) {
      const base = name.slice(0, -suffix.length);
      if (types.get(base) === 'histogram') return base;
    }
  }
  return null;
}

/** Every metric name a scrape exposes (histograms under their family name and their series names). */
export function metricNames(e: Exposition): Set<string> {
  const names = new Set<string>(e.types.keys());
  for (const s of e.samples) names.add(s.name);
  return names;
}
