// node generate.mjs --out DIR DASHBOARD.json...
// Writes DIR/<name>.ts for each dashboard: the whole JSON declared as a Dashboard, and each
// panel again as its plugin's panel type, for `tsc --noEmit --strict` to check.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, dirname, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const args = process.argv.slice(2);
const at = args.indexOf('--out');
if (at < 0 || at + 1 >= args.length || args.length < 3) {
  console.error('usage: node generate.mjs --out DIR DASHBOARD.json...');
  process.exit(2);
}
const out = resolve(args[at + 1]);
const files = args.filter((_, i) => i !== at && i !== at + 1);
const schema = resolve(dirname(fileURLToPath(import.meta.url)), 'schema');
let spec = relative(out, schema).split('\\').join('/');
if (!spec.startsWith('.')) spec = './' + spec;

mkdirSync(out, { recursive: true });
for (const file of files) {
  const dashboard = JSON.parse(readFileSync(file, 'utf8'));
  const lines = [
    `// Generated from ${basename(file)} by grafana/check/generate.mjs; do not edit.`,
    `import type { Dashboard, Panels } from '${spec}';`,
    '',
    `export const dashboard: Dashboard = ${JSON.stringify(dashboard, null, 2)};`,
  ];
  const panels = (dashboard.panels ?? []).flatMap((p) => (p.type === 'row' ? (p.panels ?? []) : [p]));
  for (const p of panels) {
    lines.push('', `export const panel${p.id}: Panels[${JSON.stringify(p.type)}] = ${JSON.stringify(p, null, 2)};`);
  }
  writeFileSync(resolve(out, basename(file).replace(/\.json$/, '.ts')), lines.join('\n') + '\n');
}
