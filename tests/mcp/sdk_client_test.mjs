// cubicle's MCP server driven by the official TypeScript SDK's Client:
//   node sdk_client_test.mjs CUBICLE stdio   `cubicle mcp` through StdioClientTransport
//   node sdk_client_test.mjs CUBICLE http    `cubicle serve --listen` /mcp through
//                                            StreamableHTTPClientTransport, with a bearer key
// Both: list the tools; run_python writes /workspace/out.txt and a later
// read_file sees it; a failing command is isError; a run that prints and
// sleeps sends progress. Exits 0, 1 (a failure), or 77 (skipped, saying why).
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { check, eventually, makeScratch, requireClients, skip } from './common.mjs';

const [cubicle, mode] = process.argv.slice(2);
if (!cubicle || !['stdio', 'http'].includes(mode)) {
  console.error('usage: node sdk_client_test.mjs CUBICLE stdio|http');
  process.exit(2);
}
await requireClients();
const { Client } = await import('@modelcontextprotocol/sdk/client/index.js');

const TOOLS = ['call_skill', 'list_files', 'read_file', 'run_python', 'run_shell', 'write_file'];

async function exercise(client) {
  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name).sort();
  check(JSON.stringify(names) === JSON.stringify(TOOLS), `tools/list: ${names}`);
  check(tools.every((t) => t.inputSchema && t.outputSchema), 'every tool has both schemas');

  // The SDK checks structuredContent against each tool's outputSchema.
  const run = await client.callTool({
    name: 'run_python',
    arguments: { code: "open('/workspace/out.txt', 'w').write('from the sdk')\nprint('written')" },
  });
  check(!run.isError, `run_python failed: ${JSON.stringify(run)}`);
  check(run.structuredContent.exit_code === 0 && run.structuredContent.stdout === 'written\n', JSON.stringify(run));
  check(run.structuredContent.files_changed.some((f) => f.path === 'out.txt' && f.change === 'created'),
        `files_changed: ${JSON.stringify(run.structuredContent.files_changed)}`);

  const read = await client.callTool({ name: 'read_file', arguments: { path: '/workspace/out.txt' } });
  check(!read.isError && read.structuredContent.content === 'from the sdk', `read_file: ${JSON.stringify(read)}`);
  check(read.content[0].type === 'text' && read.content[0].text === 'from the sdk', 'read_file text content');

  const failed = await client.callTool({ name: 'run_shell', arguments: { command: 'echo bad >&2; exit 4' } });
  check(failed.isError === true, `a failing command is isError: ${JSON.stringify(failed)}`);
  check(failed.structuredContent.exit_code === 4 && failed.structuredContent.stderr === 'bad\n', JSON.stringify(failed));

  const progress = [];
  const slow = await client.callTool(
    {
      name: 'run_python',
      arguments: { code: "import time\nfor i in range(3):\n    print('step', i, flush=True)\n    time.sleep(0.3)" },
    },
    undefined,
    { onprogress: (p) => progress.push(p) },
  );
  check(!slow.isError && slow.structuredContent.stdout === 'step 0\nstep 1\nstep 2\n', JSON.stringify(slow));
  check(progress.length >= 1, 'no progress notification for a run that prints and sleeps');
  check(progress.every((p, i) => i === 0 || p.progress > progress[i - 1].progress), `progress grows: ${JSON.stringify(progress)}`);
  check(progress.map((p) => p.message).join('').includes('step 0'), `progress messages: ${JSON.stringify(progress)}`);
  console.log(`ok: ${names.length} tools, run/read/fail, ${progress.length} progress notification(s)`);
}

async function overStdio() {
  const { StdioClientTransport } = await import('@modelcontextprotocol/sdk/client/stdio.js');
  const scratch = makeScratch();
  const transport = new StdioClientTransport({
    command: cubicle,
    args: ['mcp', '--config', scratch.config],
    env: { TMPDIR: scratch.tmp },
    stderr: 'inherit',
  });
  const client = new Client({ name: 'cubicle-sdk-test', version: '1.0.0' });
  await client.connect(transport);
  check(client.getServerVersion().name === 'cubicle', `serverInfo: ${JSON.stringify(client.getServerVersion())}`);
  try {
    await exercise(client);
  } finally {
    await client.close();  // EOF on its stdin: the server ends and removes its state directory
  }
  check(await eventually(() => fs.readdirSync(scratch.tmp).length === 0), 'the private state directory outlived the server');
  scratch.finish();
}

// `cubicle serve --listen 127.0.0.1:0` with a state directory and a key.
async function startServe(scratch, key) {
  const keys = path.join(scratch.dir, 'keys.json');
  fs.writeFileSync(keys, JSON.stringify({ keys: [{ name: 'agent', key }] }), { mode: 0o600 });
  const state = path.join(scratch.dir, 'state');
  fs.mkdirSync(state, { mode: 0o700 });
  const portFile = path.join(scratch.dir, 'port');
  const serve = spawn(cubicle, ['serve', '--config', scratch.config, '--state-dir', state, '--listen', '127.0.0.1:0',
                                '--listen-port-file', portFile, '--keys-file', keys],
                      { stdio: ['ignore', 'ignore', 'inherit'] });
  const exited = new Promise((resolve) => serve.once('exit', (code, signal) => resolve({ code, signal })));
  check(await eventually(() => fs.existsSync(portFile)), 'cubicle serve did not write its port');
  return { serve, exited, state, port: Number(fs.readFileSync(portFile, 'utf8').trim()) };
}

function mountsUnder(dir) {
  return fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n').filter((l) => l.split(' ')[4]?.startsWith(`${dir}/`));
}

async function overHttp() {
  const { StreamableHTTPClientTransport } = await import('@modelcontextprotocol/sdk/client/streamableHttp.js');
  const scratch = makeScratch();
  const key = 'sdk-test-0123456789abcdef0123456789abcdef';
  const { serve, exited, state, port } = await startServe(scratch, key);
  try {
    const url = new URL(`http://127.0.0.1:${port}/mcp`);
    // Without the key: refused before anything is made.
    const anonymous = new Client({ name: 'cubicle-sdk-test', version: '1.0.0' });
    let refused = null;
    try {
      await anonymous.connect(new StreamableHTTPClientTransport(url));
    } catch (e) {
      refused = e;
    }
    check(refused?.code === 401, `connecting without the bearer key must fail with 401: ${refused}`);

    const transport = new StreamableHTTPClientTransport(url, { requestInit: { headers: { Authorization: `Bearer ${key}` } } });
    const client = new Client({ name: 'cubicle-sdk-test', version: '1.0.0' });
    await client.connect(transport);
    check(typeof transport.sessionId === 'string' && transport.sessionId.length >= 32, `Mcp-Session-Id: ${transport.sessionId}`);
    await exercise(client);
    // DELETE /mcp: the session ends, its workspace archived and removed.
    await transport.terminateSession();
    await client.close();
    check(await eventually(() => fs.readdirSync(path.join(state, 'workspaces')).length === 0),
          'the workspace outlived its MCP session');
    check(fs.readdirSync(path.join(state, 'archives')).length === 1, 'the ended session was not archived');
  } finally {
    serve.kill('SIGTERM');
    const { code } = await exited;
    check(code === 0, `cubicle serve exited with ${code}`);
  }
  check(mountsUnder(scratch.dir).length === 0, `mounts left: ${mountsUnder(scratch.dir)}`);
  scratch.finish();
}

try {
  if (mode === 'stdio') await overStdio();
  else await overHttp();
} catch (e) {
  console.error(e);
  process.exit(1);
}
