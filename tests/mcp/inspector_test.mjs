// The official MCP Inspector's CLI mode against `cubicle mcp`:
//   node inspector_test.mjs CUBICLE
// runs `mcp-inspector-cli --cli CUBICLE mcp --method tools/list` (what
// `npx @modelcontextprotocol/inspector-cli` runs) and checks the tool
// names in its output; then one tools/call through it. Exits 0, 1, or 77
// (skipped, saying why).
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { check, makeScratch, requireClients } from './common.mjs';

const [cubicle] = process.argv.slice(2);
if (!cubicle) {
  console.error('usage: node inspector_test.mjs CUBICLE');
  process.exit(2);
}
await requireClients();

// inspector-cli 1.0.3 finds its own package.json by a path relative to the
// working directory ("../package.json"): it is run from its build/ folder.
const build = path.join(path.dirname(fileURLToPath(import.meta.url)), 'node_modules/@modelcontextprotocol/inspector-cli/build');

function inspector(scratch, ...method) {
  const run = spawnSync(process.execPath,
                        [path.join(build, 'cli.js'), '--cli', '-e', `TMPDIR=${scratch.tmp}`, '--', cubicle, 'mcp',
                         '--config', scratch.config, ...method],
                        { cwd: build, encoding: 'utf8', timeout: 60000 });
  check(run.status === 0, `the inspector exited with ${run.status}: ${run.stderr}`);
  return JSON.parse(run.stdout);
}

try {
  const scratch = makeScratch();
  const listed = inspector(scratch, '--method', 'tools/list');
  const names = listed.tools.map((t) => t.name).sort();
  check(JSON.stringify(names) === JSON.stringify(['call_skill', 'list_files', 'read_file', 'run_python', 'run_shell', 'write_file']),
        `tools/list through the inspector: ${names}`);
  const called = inspector(scratch, '--method', 'tools/call', '--tool-name', 'run_shell', '--tool-arg', 'command=echo inspected');
  check(called.structuredContent?.stdout === 'inspected\n', `tools/call through the inspector: ${JSON.stringify(called)}`);
  scratch.finish();
  console.log(`ok: the inspector lists ${names.join(', ')} and calls run_shell`);
} catch (e) {
  console.error(e);
  process.exit(1);
}
