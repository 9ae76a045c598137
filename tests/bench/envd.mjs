// envd.sh's measurements (read it): the E2B SDK's files and commands against
// cp and /execute, each pair taken in turn so that a ratio is of one moment.
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

process.env.E2B_DEBUG = 'true';
delete process.env.E2B_API_KEY;
const require = createRequire(new URL('../sdk/package.json', import.meta.url));
const { Sandbox } = await import(pathToFileURL(require.resolve('@e2b/code-interpreter')).href);

const runs = Number(process.env.RUNS || 9);
const median = (v) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];
const ms = (t0) => Number(process.hrtime.bigint() - t0) / 1e6;
const time = async (fn) => {
  const t0 = process.hrtime.bigint();
  await fn();
  return ms(t0);
};
const fmt = (x) => (x >= 10 ? x.toFixed(1) : x.toFixed(2)).padStart(8);
const row = (what, t, base, baseline) =>
  console.log(`${what.padEnd(22)}${fmt(t)}   ${baseline.padEnd(22)}${fmt(base)}  ${(t / base).toFixed(1).padStart(6)}`);

const sbx = await Sandbox.create({ debug: true, sandboxUrl: process.env.SANDCELL_URL });
const dir = mkdtempSync(join(tmpdir(), 'sandcell-bench-cp.'));
console.log(`medians of ${runs} runs, ms; the machine is shared with other work: compare the ratios, taken in turn`);
console.log(`${'sandcell'.padEnd(22)}${'ms'.padStart(8)}   ${'against'.padEnd(22)}${'ms'.padStart(8)}   ratio`);
try {
  for (const mib of [1, 16]) {
    const data = randomBytes(mib << 20);
    const src = join(dir, `src-${mib}`), dst = join(dir, `dst-${mib}`);
    writeFileSync(src, data);
    const w = [], r = [], c = [];
    for (let i = 0; i < runs; i++) {
      w.push(await time(() => sbx.files.write(`bench-${mib}.bin`, data)));
      const got = [];
      r.push(await time(async () => got.push(await sbx.files.read(`bench-${mib}.bin`, { format: 'bytes' }))));
      if (got[0].length !== data.length) throw new Error(`read ${got[0].length} bytes of ${data.length}`);
      c.push(await time(() => execFileSync('cp', [src, dst])));
    }
    const cp = median(c);
    row(`files.write ${mib} MiB`, median(w), cp, `cp of ${mib} MiB`);
    row(`files.read ${mib} MiB`, median(r), cp, `cp of ${mib} MiB`);
  }
  const cmd = [], exe = [];
  await sbx.commands.run('true');
  await sbx.runCode('x=1');
  for (let i = 0; i < 3 * runs; i++) {
    cmd.push(await time(() => sbx.commands.run('true')));
    exe.push(await time(() => sbx.runCode('x=1')));
  }
  row("commands.run('true')", median(cmd), median(exe), "runCode('x=1')");
} finally {
  rmSync(dir, { recursive: true, force: true });
}
