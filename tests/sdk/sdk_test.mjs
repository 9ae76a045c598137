// SDK compatibility test: drives a running sandcell server with the public
// @e2b/code-interpreter JS SDK in E2B debug mode (no E2B cloud, no API key).
//
//   npm install --prefix tests/sdk      # once
//   node tests/sdk/sdk_test.mjs         # server must listen on localhost:49999
//
// In debug mode the SDK sends code-interpreter requests to http://localhost:49999
// (host and port hard-coded in the SDK). SANDCELL_URL=http://host:port points it
// elsewhere through the SDK's own `sandboxUrl` option.
//
// Prints one `ok - NAME` / `not ok - NAME: REASON` line per check, then
// `N passed, M failed`; exits 0 only when nothing failed.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';

process.env.E2B_DEBUG = 'true';
delete process.env.E2B_API_KEY; // debug mode must not need one

const CALL_TIMEOUT_MS = 30_000;
const OVERALL_TIMEOUT_MS = 120_000;

let passed = 0;
let failed = 0;
let finished = false;

function summaryAndExit() {
  if (finished) return;
  finished = true;
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed === 0 ? 0 : 1);
}

const overall = setTimeout(() => {
  console.log(`not ok - overall: script did not finish within ${OVERALL_TIMEOUT_MS / 1000} s`);
  failed++;
  summaryAndExit();
}, OVERALL_TIMEOUT_MS);
overall.unref();

// Races a promise against a timer so that a hung server fails the check
// instead of hanging the script.
function withTimeout(promise, what, ms = CALL_TIMEOUT_MS) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} timed out after ${ms / 1000} s`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

function oneLine(s) {
  return String(s).replace(/\s+/g, ' ').trim().slice(0, 400);
}

function describeError(e) {
  if (e instanceof assert.AssertionError) {
    return oneLine(`${e.message}`);
  }
  const cause = e?.cause ? ` (cause: ${e.cause.code ?? ''} ${e.cause.message ?? e.cause})` : '';
  return oneLine(`${e?.name ?? 'Error'}: ${e?.message ?? e}${cause}`);
}

async function check(name, fn) {
  try {
    await fn();
    passed++;
    console.log(`ok - ${name}`);
  } catch (e) {
    failed++;
    console.log(`not ok - ${name}: ${describeError(e)}`);
  }
}

function describeExecution(ex) {
  return JSON.stringify({
    results: ex.results.map((r) => ({ text: r.text, html: r.html, main: r.isMainResult })),
    stdout: ex.logs.stdout,
    stderr: ex.logs.stderr,
    error: ex.error ? { name: ex.error.name, value: ex.error.value } : undefined,
  });
}

function mainText(ex) {
  assert.equal(ex.error, undefined, `unexpected execution error: ${describeExecution(ex)}`);
  const main = ex.results.find((r) => r.isMainResult);
  assert.ok(main, `no main result: ${describeExecution(ex)}`);
  return main.text;
}

let Sandbox;
let NotFoundError;
let CommandExitError;
let sbx;

async function run(code, opts = {}) {
  return withTimeout(
    sbx.runCode(code, { timeoutMs: CALL_TIMEOUT_MS, requestTimeoutMs: CALL_TIMEOUT_MS, ...opts }),
    `runCode(${JSON.stringify(code)})`,
  );
}

async function main() {
  await check('import @e2b/code-interpreter', async () => {
    const mod = await import('@e2b/code-interpreter');
    Sandbox = mod.Sandbox;
    NotFoundError = mod.NotFoundError;
    CommandExitError = mod.CommandExitError;
    assert.equal(typeof Sandbox?.create, 'function');
  });
  if (!Sandbox) return;

  await check('Sandbox.create in debug mode', async () => {
    const opts = { debug: true };
    if (process.env.SANDCELL_URL) opts.sandboxUrl = process.env.SANDCELL_URL;
    sbx = await withTimeout(Sandbox.create(opts), 'Sandbox.create');
    assert.ok(sbx, 'no sandbox object');
  });
  if (!sbx) return;

  await check('runCode result: 1+1 -> 2', async () => {
    const ex = await run('1+1');
    assert.equal(mainText(ex), '2');
    assert.equal(ex.text, '2');
  });

  await check('state persists across runCode calls', async () => {
    const ex1 = await run('x = 41');
    assert.equal(ex1.error, undefined, `x = 41 failed: ${describeExecution(ex1)}`);
    const ex2 = await run('x + 1');
    assert.equal(mainText(ex2), '42');
  });

  await check('error: 1/0 -> ZeroDivisionError with traceback', async () => {
    const ex = await run('1/0');
    assert.ok(ex.error, `no error reported: ${describeExecution(ex)}`);
    assert.equal(ex.error.name, 'ZeroDivisionError');
    assert.equal(typeof ex.error.traceback, 'string', 'traceback is not a string');
    assert.ok(ex.error.traceback.length > 0, 'traceback is empty');
  });

  await check("onStdout receives 'hello\\n'", async () => {
    const lines = [];
    const ex = await run("print('hello')", { onStdout: (m) => lines.push(m.line) });
    assert.equal(ex.error, undefined, `unexpected error: ${describeExecution(ex)}`);
    assert.equal(lines.join(''), 'hello\n', `onStdout got ${JSON.stringify(lines)}`);
    assert.equal(ex.logs.stdout.join(''), 'hello\n', `logs.stdout is ${JSON.stringify(ex.logs.stdout)}`);
  });

  await check('envs option is visible to that run', async () => {
    const ex = await run("import os; os.environ['FOO']", { envs: { FOO: 'bar' } });
    assert.equal(mainText(ex), 'bar');
  });

  await check('envs option does not leak into the next run', async () => {
    // os.environ.get('FOO') evaluates to None, which IPython does not display,
    // so the value is printed and read from stdout.
    const ex = await run("import os; print(os.environ.get('FOO'))");
    assert.equal(ex.error, undefined, `unexpected error: ${describeExecution(ex)}`);
    assert.equal(ex.logs.stdout.join(''), 'None\n', `stdout is ${JSON.stringify(ex.logs.stdout)}`);
  });

  await check('!pip install of a local wheel, then import', async () => {
    // the wheel: a zip of one module and its metadata, built offline in the sandbox
    const build = [
      'import base64, hashlib, zipfile',
      "files = {'sdktoy/__init__.py': b'VALUE = 42\\n',",
      "         'sdktoy-0.1.dist-info/METADATA': b'Metadata-Version: 2.1\\nName: sdktoy\\nVersion: 0.1\\n',",
      "         'sdktoy-0.1.dist-info/WHEEL': b'Wheel-Version: 1.0\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n'}",
      "record = ['%s,sha256=%s,%d' % (n, base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode(), len(d))",
      '          for n, d in files.items()] + ["sdktoy-0.1.dist-info/RECORD,,"]',
      "with zipfile.ZipFile('/tmp/sdktoy-0.1-py3-none-any.whl', 'w') as z:",
      '    for n, d in files.items():',
      '        z.writestr(n, d)',
      "    z.writestr('sdktoy-0.1.dist-info/RECORD', '\\n'.join(record) + '\\n')",
    ].join('\n');
    const ex1 = await run(build);
    assert.equal(ex1.error, undefined, `building the wheel: ${describeExecution(ex1)}`);
    const ex2 = await run('!pip install --no-index /tmp/sdktoy-0.1-py3-none-any.whl');
    assert.equal(ex2.error, undefined, `pip: ${describeExecution(ex2)}`);
    assert.match(ex2.logs.stdout.join(''), /Successfully installed sdktoy-0\.1/);
    const ex3 = await run('import sdktoy; sdktoy.VALUE');
    assert.equal(mainText(ex3), '42', `import: ${describeExecution(ex3)}`);
  });

  await check('display(HTML) yields a result with html', async () => {
    const ex = await run("from IPython.display import HTML, display; display(HTML('<b>x</b>'))");
    assert.equal(ex.error, undefined, `unexpected error: ${describeExecution(ex)}`);
    const r = ex.results.find((res) => typeof res.html === 'string' && res.html.includes('<b>x</b>'));
    assert.ok(r, `no html result: ${describeExecution(ex)}`);
  });

  let ctx;
  await check("createCodeContext({cwd:'/tmp'}) -> id, language python", async () => {
    const c = await withTimeout(
      sbx.createCodeContext({ cwd: '/tmp', requestTimeoutMs: CALL_TIMEOUT_MS }),
      'createCodeContext',
    );
    assert.equal(typeof c?.id, 'string', `bad context: ${JSON.stringify(c)}`);
    assert.ok(c.id.length > 0, 'empty context id');
    assert.equal(c.language, 'python');
    assert.equal(c.cwd, '/tmp');
    ctx = c;
  });

  const needCtx = () => assert.ok(ctx, 'no context (createCodeContext failed)');

  await check('runCode in context: os.getcwd() -> /tmp', async () => {
    needCtx();
    const ex = await run('import os; os.getcwd()', { context: ctx });
    assert.equal(mainText(ex), '/tmp');
  });

  await check('context state is separate from the default context', async () => {
    needCtx();
    const ex = await run("'x' in globals()", { context: ctx });
    assert.equal(mainText(ex), 'False');
  });

  const listIds = async () => {
    const list = await withTimeout(sbx.listCodeContexts(), 'listCodeContexts');
    assert.ok(Array.isArray(list), `listCodeContexts returned ${JSON.stringify(list)}`);
    return list.map((c) => c.id);
  };

  await check('listCodeContexts includes the new context', async () => {
    needCtx();
    const ids = await listIds();
    assert.ok(ids.includes(ctx.id), `${ctx.id} not in ${JSON.stringify(ids)}`);
  });

  await check('restartCodeContext clears state and keeps the id', async () => {
    needCtx();
    const ex1 = await run('y = 5', { context: ctx });
    assert.equal(ex1.error, undefined, `y = 5 failed: ${describeExecution(ex1)}`);
    await withTimeout(sbx.restartCodeContext(ctx), 'restartCodeContext');
    const ids = await listIds();
    assert.ok(ids.includes(ctx.id), `${ctx.id} gone after restart: ${JSON.stringify(ids)}`);
    const ex2 = await run('y', { context: ctx });
    assert.ok(ex2.error, `y still defined after restart: ${describeExecution(ex2)}`);
    assert.equal(ex2.error.name, 'NameError');
  });

  await check('restarted context keeps its cwd', async () => {
    needCtx();
    const ex = await run('import os; os.getcwd()', { context: ctx });
    assert.equal(mainText(ex), '/tmp');
  });

  await check('removeCodeContext removes it from listCodeContexts', async () => {
    needCtx();
    await withTimeout(sbx.removeCodeContext(ctx.id), 'removeCodeContext');
    const ids = await listIds();
    assert.ok(!ids.includes(ctx.id), `${ctx.id} still listed: ${JSON.stringify(ids)}`);
  });

  await check('listCodeContexts lists contexts in the order they were created', async () => {
    // A and B may come from the warm pool (R never does: its slow start gives
    // the pool time to refill for B); the newest is last all the same.
    const made = [];
    try {
      for (const language of ['python', 'r', 'python']) {
        made.push(
          await withTimeout(
            sbx.createCodeContext({ language, requestTimeoutMs: CALL_TIMEOUT_MS }),
            `createCodeContext(${language})`,
          ),
        );
      }
      const ids = await listIds();
      assert.deepEqual(ids.slice(-3), made.map((c) => c.id), `listed: ${JSON.stringify(ids)}`);
    } finally {
      for (const c of made) await withTimeout(sbx.removeCodeContext(c.id), 'removeCodeContext');
    }
  });

  // Every installed language through runCode(code, {language}).
  const langs = [
    ['javascript', "console.log('hi'); 6*7", '42'],
    ['typescript', "const s: string = 'hi'; console.log(s); const n: number = 6; n * 7", '42'],
    ['r', "cat('hi\\n'); 6*7", '[1] 42'],
    ['bash', 'echo hi', undefined],
    ['java', 'System.out.println("hi"); 6*7', '42'],
  ];
  for (const [language, code, text] of langs) {
    await check(`runCode(code, {language: '${language}'})`, async () => {
      const ex = await run(code, { language });
      assert.equal(ex.error, undefined, `unexpected error: ${describeExecution(ex)}`);
      assert.equal(ex.logs.stdout.join(''), 'hi\n', `stdout: ${describeExecution(ex)}`);
      if (text) assert.equal(mainText(ex), text);
    });
  }

  await check("runCode(code, {language: 'java', envs}) sets System.getProperty, then restores it", async () => {
    const print = 'System.out.println(System.getProperty("SDK_P") + "|" + System.getenv("SDK_P"))';
    const ex = await run(print, { language: 'java', envs: { SDK_P: 'p"1 \u00e9' } });
    assert.equal(ex.logs.stdout.join(''), 'p"1 \u00e9|p"1 \u00e9\n', `stdout: ${describeExecution(ex)}`);
    const after = await run(print, { language: 'java' });
    assert.equal(after.logs.stdout.join(''), 'null|null\n', `after: ${describeExecution(after)}`);
  });

  await check("runCode(code, {language: 'js', envs}) sees its env var", async () => {
    const ex = await run("console.log(Deno.env.get('SDK_V'))", { language: 'js', envs: { SDK_V: 'v"1' } });
    assert.equal(ex.logs.stdout.join(''), 'v"1\n', `stdout: ${describeExecution(ex)}`);
  });

  await check('DataFrame -> results[0].data by column', async () => {
    const ex = await run(
      "import pandas as pd\npd.DataFrame({'city': ['Oslo', 'Rome'], 'temp': [3.5, 21.0]})",
    );
    assert.equal(ex.error, undefined, `unexpected error: ${describeExecution(ex)}`);
    const data = ex.results[0]?.data;
    assert.ok(data && typeof data === 'object', `no data: ${describeExecution(ex)}`);
    assert.deepEqual(Object.keys(data), ['city', 'temp']);
    assert.deepEqual(data.city, ['Oslo', 'Rome']);
    assert.deepEqual(data.temp, [3.5, 21]);
    assert.deepEqual(ex.logs.stderr, []);
  });

  await check("line plot -> a result with png and chart.type 'line' and its points", async () => {
    const ex = await run(
      "import matplotlib.pyplot as plt\nplt.figure()\nplt.plot([1, 2, 3], [4, 1, 9])\n" +
        "plt.title('Growth')\nplt.show()",
    );
    assert.equal(ex.error, undefined, `unexpected error: ${describeExecution(ex)}`);
    const r = ex.results.find((x) => x.chart);
    assert.ok(r, `no result with a chart: ${describeExecution(ex)}`);
    assert.ok(r.png?.startsWith('iVBORw0KGgo'), 'the chart result has no png');
    assert.equal(r.chart.type, 'line');
    assert.equal(r.chart.title, 'Growth');
    assert.deepEqual(r.chart.elements[0].points, [[1, 4], [2, 1], [3, 9]]);
    assert.deepEqual(ex.logs.stderr, []);
  });

  await check('a chart without title or axis labels has them null', async () => {
    const ex = await run(
      'import matplotlib.pyplot as plt\nplt.figure()\nplt.scatter([1, 2], [3, 4])\nplt.show()',
    );
    assert.equal(ex.error, undefined, `unexpected error: ${describeExecution(ex)}`);
    const chart = ex.results.find((x) => x.chart)?.chart;
    assert.ok(chart, `no result with a chart: ${describeExecution(ex)}`);
    assert.equal(chart.type, 'scatter');
    assert.equal(chart.title, null);
    assert.equal(chart.x_label, null);
    assert.equal(chart.y_label, null);
  });

  await check('[1, 2, {"a": 3}] -> results[0].json', async () => {
    const ex = await run('[1, 2, {"a": 3}]');
    assert.deepEqual(ex.results[0]?.json, [1, 2, { a: 3 }], describeExecution(ex));
  });

  await check('runCode in a removed context -> NotFoundError', async () => {
    needCtx();
    await assert.rejects(run('1', { context: ctx }), (e) => {
      assert.ok(e instanceof NotFoundError, `expected NotFoundError, got ${describeError(e)}`);
      return true;
    });
  });

  await envdChecks();
}

// Files through envd's API (docs/ENVD.md), which the SDK's debug mode sends
// to http://localhost:49983; with SANDCELL_URL, to that one URL with
// E2b-Sandbox-Port: 49983, which the code listener hands to envd.
async function envdChecks() {
  const f = sbx.files;
  const c_run = (cmd) => sbx.commands.run(cmd);
  await check("files.write('data.csv') then runCode reads it with pandas", async () => {
    const info = await withTimeout(f.write('data.csv', 'a,b\n1,2\n3,4\n'), 'files.write');
    assert.equal(info.path, '/home/user/data.csv');
    const ex = await run("import pandas as pd\nint(pd.read_csv('data.csv')['b'].sum())");
    assert.equal(mainText(ex), '6', describeExecution(ex));
  });
  await check("createCodeContext({cwd: '/root'}): runCode runs there, its files are envd's", async () => {
    const root = await withTimeout(
      sbx.createCodeContext({ cwd: '/root', requestTimeoutMs: CALL_TIMEOUT_MS }),
      'createCodeContext',
    );
    try {
      const ex = await run("import os\nopen('r.txt', 'w').write('in /root')\nos.getcwd()", { context: root });
      assert.equal(mainText(ex), '/root');
      assert.equal(await withTimeout(f.read('/root/r.txt'), 'files.read'), 'in /root');
      await withTimeout(f.write('/root/w.txt', 'from the SDK'), 'files.write');
      const back = await run("open('w.txt').read()", { context: root });
      assert.equal(mainText(back), 'from the SDK');
    } finally {
      await withTimeout(sbx.removeCodeContext(root.id), 'removeCodeContext');
    }
  });
  // A file the SDK writes, read by runCode in each language, and one it writes read back.
  const rPresent = await run('1', { language: 'r' }).then(
    (ex) => !ex.error,
    () => false,
  );
  const fileLangs = [
    ['js', "console.log(Deno.readTextFileSync('/home/user/lang/in.txt'))",
      "Deno.writeTextFileSync('/home/user/lang/js.txt', 'from js')"],
    ['r', "cat(readLines('/home/user/lang/in.txt'), '\\n')",
      "writeLines('from r', '/home/user/lang/r.txt')"],
  ];
  for (const [language, read, write] of fileLangs) {
    await check(`files.write read by runCode in ${language}, and a file it writes read by files.read`, async () => {
      if (language === 'r' && !rPresent) {
        console.log('# skip: no R kernel');
        return;
      }
      await withTimeout(f.write('lang/in.txt', 'from the SDK'), 'files.write');
      const ex = await run(read, { language });
      assert.equal(ex.error, undefined, describeExecution(ex));
      assert.equal(ex.logs.stdout.join('').trim(), 'from the SDK', describeExecution(ex));
      const w = await run(write, { language });
      assert.equal(w.error, undefined, describeExecution(w));
      const got = await withTimeout(f.read(`lang/${language}.txt`), 'files.read');
      assert.equal(got.trim(), `from ${language}`);
    });
  }
  await check('files.read of a file a context wrote', async () => {
    const ex = await run("open('from_code.txt', 'w').write('made by runCode')");
    assert.equal(ex.error, undefined, describeExecution(ex));
    assert.equal(await withTimeout(f.read('/home/user/from_code.txt'), 'files.read'), 'made by runCode');
  });
  await check('a chart saved by runCode downloads with files.read as PNG bytes', async () => {
    const ex = await run(
      "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.savefig('chart.png')\nplt.close()",
    );
    assert.equal(ex.error, undefined, describeExecution(ex));
    const png = await withTimeout(f.read('chart.png', { format: 'bytes' }), 'files.read');
    assert.deepEqual(Array.from(png.slice(0, 4)), [0x89, 0x50, 0x4e, 0x47], 'not a PNG');
    assert.ok(png.length > 1000, `${png.length} bytes`);
  });
  await check('files.read of bytes round trips', async () => {
    const bytes = new Uint8Array([0, 1, 2, 250, 255]);
    await withTimeout(f.write('bin/b.dat', bytes), 'files.write');
    const got = await withTimeout(f.read('bin/b.dat', { format: 'bytes' }), 'files.read');
    assert.deepEqual(Array.from(got), Array.from(bytes));
  });
  await check('files.write and files.read with gzip', async () => {
    const text = 'x,y\n'.repeat(1000);
    await withTimeout(f.write('gz.csv', text, { gzip: true }), 'files.write');
    assert.equal(await withTimeout(f.read('gz.csv', { gzip: true }), 'files.read'), text);
  });
  await check('files.watchDir sees a file made, written and removed, recursively', async () => {
    await withTimeout(f.makeDir('watched/sub'), 'files.makeDir');
    const seen = [];
    const w = await withTimeout(
      f.watchDir('watched', (e) => seen.push(`${e.type} ${e.name}`), { recursive: true }),
      'files.watchDir',
    );
    await withTimeout(f.write('watched/sub/new.txt', 'x'), 'files.write');
    await withTimeout(c_run("rm watched/sub/new.txt"), 'commands.run');
    for (const end = Date.now() + 10000; !seen.some((s) => s.startsWith('remove')) && Date.now() < end; )
      await new Promise((r) => setTimeout(r, 50));
    await w.stop();
    assert.ok(seen.includes('create sub/new.txt'), JSON.stringify(seen));
    assert.ok(seen.includes('write sub/new.txt'), JSON.stringify(seen));
    assert.ok(seen.includes('remove sub/new.txt'), JSON.stringify(seen));
  });
  await check('files.watchDir with includeEntry gives each change its entry', async () => {
    const entries = [];
    const w = await withTimeout(
      f.watchDir('watched', (e) => e.entry && entries.push(e.entry), { includeEntry: true }),
      'files.watchDir',
    );
    await withTimeout(f.write('watched/with-entry.txt', '12345'), 'files.write');
    for (const end = Date.now() + 10000; !entries.some((e) => e.size === 5) && Date.now() < end; )
      await new Promise((r) => setTimeout(r, 50));
    await w.stop();
    const e = entries.find((x) => x.size === 5);
    assert.ok(e, JSON.stringify(entries));
    assert.equal(e.path, '/home/user/watched/with-entry.txt');
    assert.equal(e.type, 'file');
  });
  await check('files.write of several files', async () => {
    const infos = await withTimeout(
      f.write([{ path: 'many/one.txt', data: '1' }, { path: 'many/two.txt', data: '2' }]),
      'files.write',
    );
    assert.equal(infos.length, 2);
    assert.equal(await f.read('many/two.txt'), '2');
  });
  await check('files.exists: true, then false for a missing path', async () => {
    assert.equal(await withTimeout(f.exists('data.csv'), 'files.exists'), true);
    assert.equal(await withTimeout(f.exists('no/such/file'), 'files.exists'), false);
  });
  await check('files.makeDir: true, then false when it exists', async () => {
    assert.equal(await withTimeout(f.makeDir('made/deep'), 'files.makeDir'), true);
    assert.equal(await withTimeout(f.makeDir('made/deep'), 'files.makeDir'), false);
  });
  await check('files.list names what is there, with types', async () => {
    const entries = await withTimeout(f.list('/home/user/many'), 'files.list');
    const names = entries.map((e) => e.name).sort();
    assert.deepEqual(names, ['one.txt', 'two.txt']);
    assert.equal(entries[0].type, 'file');
    const top = await withTimeout(f.list('/home/user'), 'files.list');
    assert.equal(top.find((e) => e.name === 'made')?.type, 'dir');
  });
  await check('files.getInfo: size and path', async () => {
    const info = await withTimeout(f.getInfo('data.csv'), 'files.getInfo');
    assert.equal(info.size, 12);
    assert.equal(info.path, '/home/user/data.csv');
  });
  await check('files.rename moves it', async () => {
    const info = await withTimeout(f.rename('many/one.txt', 'made/one.txt'), 'files.rename');
    assert.equal(info.path, '/home/user/made/one.txt');
    assert.equal(await f.exists('many/one.txt'), false);
    assert.equal(await f.read('made/one.txt'), '1');
  });
  await check('files.remove, then read -> NotFoundError', async () => {
    await withTimeout(f.remove('made'), 'files.remove');
    assert.equal(await f.exists('made'), false);
    await assert.rejects(f.read('made/one.txt'), (e) => {
      assert.ok(e instanceof NotFoundError, `expected NotFoundError, got ${describeError(e)}`);
      return true;
    });
  });
  await check("the README's data-analysis example runs as printed", async () => {
    // README.md's block marked "sdk_test.mjs runs this block", run as it is
    // there with this test's sbx, and what it leaves checked
    const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
    const m = readme.match(/```js\n(\/\/[^\n]*sdk_test\.mjs runs this block[^\n]*\n[\s\S]*?)```/);
    assert.ok(m, 'no block marked "sdk_test.mjs runs this block" in README.md');
    const printed = [];
    const AsyncFunction = (async () => {}).constructor;
    const example = new AsyncFunction('sbx', 'console', `${m[1]}\nreturn { analysis, chart };`);
    const { analysis, chart } = await withTimeout(
      example(sbx, { log: (...a) => printed.push(a.join(' ')) }),
      "the README's example",
      2 * CALL_TIMEOUT_MS,
    );
    assert.equal(analysis.error, undefined, describeExecution(analysis));
    assert.match(analysis.text, /^17\.63/, describeExecution(analysis));
    assert.deepEqual(printed, [analysis.text]);
    assert.deepEqual(Array.from(chart.slice(0, 4)), [0x89, 0x50, 0x4e, 0x47], 'not a PNG');
    assert.ok(chart.length > 1000, `${chart.length} bytes`);
  });
  await commandChecks();
}

// Commands through envd's process.Process (docs/ENVD.md): in a box like a
// context's, as its uid, in /home/user.
async function commandChecks() {
  const c = sbx.commands;
  await check("commands.run('ls -la') lists the workspace", async () => {
    const r = await withTimeout(c.run('ls -la'), 'commands.run');
    assert.equal(r.exitCode, 0);
    assert.match(r.stdout, /data\.csv/);
  });
  await check('commands.run: stdout and stderr live, and a non-zero exit is CommandExitError', async () => {
    const seen = [];
    await assert.rejects(
      withTimeout(
        c.run('echo out; echo err >&2; exit 3', { onStdout: (d) => seen.push(d), onStderr: (d) => seen.push(d) }),
        'commands.run',
      ),
      (e) => {
        assert.ok(e instanceof CommandExitError, `expected CommandExitError, got ${describeError(e)}`);
        assert.equal(e.exitCode, 3);
        assert.equal(e.stdout, 'out\n');
        assert.equal(e.stderr, 'err\n');
        return true;
      },
    );
    assert.deepEqual(seen.sort(), ['err\n', 'out\n']);
  });
  await check('commands.run with cwd and envs', async () => {
    const r = await withTimeout(c.run('pwd; echo $FOO', { cwd: '/tmp', envs: { FOO: 'bar' } }), 'commands.run');
    assert.equal(r.stdout, '/tmp\nbar\n');
  });
  await check('a file a command writes is read by runCode', async () => {
    await withTimeout(c.run("echo 'from a command' > cmd.txt"), 'commands.run');
    const ex = await run("open('cmd.txt').read().strip()");
    assert.equal(mainText(ex), 'from a command', describeExecution(ex));
  });
  await check('a background command is listed, killed, and no longer listed', async () => {
    const h = await withTimeout(c.run('sleep 60', { background: true }), 'commands.run');
    assert.ok(h.pid > 0, `pid ${h.pid}`);
    const listed = await withTimeout(c.list(), 'commands.list');
    const mine = listed.find((p) => p.pid === h.pid);
    assert.ok(mine, `pid ${h.pid} not in ${JSON.stringify(listed)}`);
    assert.deepEqual(mine.args, ['-l', '-c', 'sleep 60']);
    assert.equal(await withTimeout(h.kill(), 'kill'), true);
    await assert.rejects(withTimeout(h.wait(), 'wait'));
    const after = await withTimeout(c.list(), 'commands.list');
    assert.equal(after.find((p) => p.pid === h.pid), undefined);
    assert.equal(await c.kill(h.pid), false);
  });
  await check('commands.connect follows a running command to its end, beside its first client', async () => {
    const h = await withTimeout(c.run('sleep 1; echo later', { background: true }), 'commands.run');
    const again = await withTimeout(c.connect(h.pid), 'commands.connect');
    const r = await withTimeout(again.wait(), 'wait');
    assert.equal(r.stdout, 'later\n');
    assert.equal((await withTimeout(h.wait(), 'wait')).stdout, 'later\n');
    await assert.rejects(withTimeout(c.connect(999999), 'commands.connect'));
  });
  await check('pty.create: an interactive shell takes input, answers, resizes and is killed', async () => {
    let out = '';
    const dec = new TextDecoder();
    const enc = new TextEncoder();
    const until = async (re) => {
      for (const end = Date.now() + 15000; !re.test(out) && Date.now() < end; )
        await new Promise((r) => setTimeout(r, 50));
      assert.match(out, re);
    };
    const h = await withTimeout(
      sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { out += dec.decode(d); } }),
      'pty.create',
    );
    await withTimeout(sbx.pty.sendInput(h.pid, enc.encode('echo pty-$((6*7))\n')), 'pty.sendInput');
    await until(/pty-42/);
    await withTimeout(sbx.pty.resize(h.pid, { cols: 100, rows: 30 }), 'pty.resize');
    await withTimeout(sbx.pty.sendInput(h.pid, enc.encode('stty size\n')), 'pty.sendInput');
    await until(/30 100/);
    assert.equal(await withTimeout(h.kill(), 'kill'), true);
  });
  await check('stdin: sendStdin then closeStdin reach a background cat', async () => {
    const h = await withTimeout(c.run('cat', { background: true, stdin: true }), 'commands.run');
    await withTimeout(c.sendStdin(h.pid, 'piped in\n'), 'sendStdin');
    await withTimeout(c.closeStdin(h.pid), 'closeStdin');
    const r = await withTimeout(h.wait(), 'wait');
    assert.equal(r.stdout, 'piped in\n');
  });
}

main()
  .catch((e) => {
    failed++;
    console.log(`not ok - script: ${describeError(e)}`);
  })
  .finally(summaryAndExit);
