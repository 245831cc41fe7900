// Offline checks of Kubernetes manifests, with no cluster:
//
//   node validate.mjs [--extract DIR] FILE.yaml...
//
// 1. Every YAML document parses, with no duplicate key.
// 2. Every object validates against the Kubernetes API's schema
//    (kubernetes-models: types, required fields, formats, enums).
// 3. Every object type-checks against the API's TypeScript types with
//    excess-property checks, which the schema alone does not make: a
//    misspelt field (`readinesProbe`) is an error, not a silent no-op.
// 4. What cubicle needs of its own manifests (cubicleChecks below), when
//    the files hold a DaemonSet running `cubicle serve`.
// With --extract DIR, the ConfigMap's config.json and the Secret's
// keys.json are written to DIR for `cubicle serve --check-config`.
//
// Exit 0 when every check passes, 1 otherwise (each failure on stderr).
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import YAML from "yaml";
import ts from "typescript";

const require = createRequire(import.meta.url);
const failures = [];
const fail = (where, message) => failures.push(`${where}: ${message}`);

// ---- reading -------------------------------------------------------------

function readDocuments(file) {
  const docs = [];
  YAML.parseAllDocuments(fs.readFileSync(file, "utf8"), { uniqueKeys: true }).forEach((doc, i) => {
    const where = `${file} #${i + 1}`;
    for (const e of doc.errors) fail(where, `YAML: ${e.message}`);
    const value = doc.toJS();
    if (value === null || value === undefined) return;  // an empty document (a trailing ---)
    if (typeof value !== "object" || Array.isArray(value)) return fail(where, "not a Kubernetes object");
    docs.push({ where: `${where} (${value.kind ?? "?"} ${value.metadata?.name ?? "?"})`, value });
  });
  return docs;
}

// apiVersion "apps/v1", kind "DaemonSet" -> "kubernetes-models/apps/v1/DaemonSet".
function modelPath(object) {
  if (typeof object.apiVersion !== "string" || typeof object.kind !== "string") return null;
  return `kubernetes-models/${object.apiVersion}/${object.kind}`;
}

// ---- 2. the API's schema --------------------------------------------------

function schemaCheck({ where, value }) {
  const module = modelPath(value);
  if (module === null) return fail(where, "no apiVersion or kind");
  let Model;
  try {
    Model = require(module)[value.kind];
  } catch {
    return fail(where, `no model for ${value.apiVersion} ${value.kind} in kubernetes-models`);
  }
  try {
    new Model(value).validate();
  } catch (e) {
    fail(where, `schema: ${e.message}`);
  }
}

// ---- 3. the API's types, with excess-property checks ----------------------

function typeCheck(docs) {
  const dir = fs.mkdtempSync(path.join(path.dirname(new URL(import.meta.url).pathname), ".typecheck-"));
  try {
    const file = path.join(dir, "manifests.ts");
    const lines = [];
    docs.forEach(({ value }, i) => {
      const module = modelPath(value);
      if (module === null) return;
      lines.push(`import type { I${value.kind} as T${i} } from ${JSON.stringify(module)};`);
      lines.push(`export const m${i}: T${i} = ${JSON.stringify(value, null, 1)};`);
    });
    fs.writeFileSync(file, lines.join("\n") + "\n");
    const program = ts.createProgram([file], {
      noEmit: true, strict: true, skipLibCheck: true, target: ts.ScriptTarget.ES2020,
      module: ts.ModuleKind.CommonJS, moduleResolution: ts.ModuleResolutionKind.Node10, types: [],
    });
    for (const d of ts.getPreEmitDiagnostics(program)) {
      let where = "types";
      if (d.file && d.start !== undefined) {
        // The document a diagnostic falls in: the last `export const mN` above it.
        const before = d.file.text.slice(0, d.start);
        const n = [...before.matchAll(/export const m(\d+)/g)].pop();
        if (n) where = docs[Number(n[1])].where;
      }
      fail(where, `types: ${ts.flattenDiagnosticMessageText(d.messageText, " ")}`);
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

// ---- 4. what cubicle needs ------------------------------------------------

// cubicle's config is JSON with // and /* */ comments (docs/config.md).
function stripJsonComments(text) {
  let out = "";
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '"') {
      const start = i;
      for (i++; i < text.length && text[i] !== '"'; i++) if (text[i] === "\\") i++;
      out += text.slice(start, i + 1);
    } else if (c === "/" && text[i + 1] === "/") {
      while (i < text.length && text[i] !== "\n") i++;
      out += "\n";
    } else if (c === "/" && text[i + 1] === "*") {
      const end = text.indexOf("*/", i + 2);
      i = end < 0 ? text.length : end + 1;
    } else {
      out += c;
    }
  }
  return out;
}

const byKind = (docs, kind) => docs.filter((d) => d.value.kind === kind);
const named = (docs, kind, name) => byKind(docs, kind).find((d) => d.value.metadata?.name === name);
const secretData = (secret) => ({
  ...Object.fromEntries(Object.entries(secret.data ?? {}).map(([k, v]) => [k, Buffer.from(v, "base64").toString()])),
  ...(secret.stringData ?? {}),
});

function cubicleChecks(docs, extractDir) {
  const daemonSets = byKind(docs, "DaemonSet").filter(({ value }) =>
    (value.spec?.template?.spec?.containers ?? []).some((c) => (c.args ?? [])[0] === "serve"));
  for (const ds of daemonSets) {
    const { where, value } = ds;
    const pod = value.spec.template.spec;
    const container = pod.containers.find((c) => (c.args ?? [])[0] === "serve");
    const args = container.args;
    const argOf = (flag) => { const i = args.indexOf(flag); return i >= 0 ? args[i + 1] : undefined; };
    const volumes = new Map((pod.volumes ?? []).map((v) => [v.name, v]));
    const mounts = container.volumeMounts ?? [];

    for (const m of mounts) if (!volumes.has(m.name)) fail(where, `volumeMount ${m.mountPath}: no volume named ${m.name}`);
    // The state directory lock and the host port allow one daemon per node.
    const rolling = value.spec.updateStrategy?.rollingUpdate ?? {};
    if (String(rolling.maxSurge ?? 0) !== "0") fail(where, "maxSurge must be 0: a second daemon on a node finds the state directory locked");

    // Keys: the daemon opens its keys file with O_NOFOLLOW, and a Secret
    // volume's files are symlinks, so the file must be a subPath mount.
    const keysFile = argOf("--keys-file");
    if (keysFile === undefined) fail(where, "serve without --keys-file: HTTP off loopback needs keys");
    const keysMount = mounts.find((m) => m.mountPath === keysFile);
    if (keysFile !== undefined && (!keysMount || !keysMount.subPath)) {
      fail(where, `--keys-file ${keysFile} must be a subPath mount of the Secret (the daemon refuses a symlink)`);
    }

    if (container.securityContext?.privileged !== true && mounts.some((m) => m.mountPropagation === "Bidirectional")) {
      fail(where, "mountPropagation Bidirectional needs privileged: true (the kubelet refuses it otherwise)");
    }

    // Probes: liveness on /healthz (no key), readiness needs the key.
    for (const probe of ["livenessProbe", "startupProbe"]) {
      if (container[probe]?.httpGet?.path !== "/healthz") fail(where, `${probe} must GET /healthz (the one path that needs no key)`);
    }
    if (container.readinessProbe?.httpGet && !container.readinessProbe.httpGet.httpHeaders) {
      fail(where, "readinessProbe: /readyz needs a key; an httpGet without one is always 401");
    }

    // Session workspaces must outlive the container: a Bidirectional mount
    // at STATE/workspaces, which the kubelet allows only when privileged.
    const configMount = mounts.find((m) => argOf("--config")?.startsWith(m.mountPath + "/"));
    const configMap = configMount && volumes.get(configMount.name)?.configMap;
    const configDoc = configMap && named(docs, "ConfigMap", configMap.name);
    if (!configMount) fail(where, `--config ${argOf("--config")}: no volume mounted there`);
    if (configMap && !configDoc && byKind(docs, "ConfigMap").length > 0) fail(where, `no ConfigMap ${configMap.name}`);
    if (configDoc) {
      const key = argOf("--config").slice(configMount.mountPath.length + 1);
      const text = configDoc.value.data?.[key];
      if (text === undefined) return fail(configDoc.where, `no ${key} in data`);
      let config;
      try {
        config = JSON.parse(stripJsonComments(text));
      } catch (e) {
        return fail(configDoc.where, `${key}: ${e.message}`);
      }
      if (extractDir) fs.writeFileSync(path.join(extractDir, "config.json"), text);
      const state = config.sessions?.state_dir;
      if (state) {
        const ws = mounts.find((m) => m.mountPath === `${state}/workspaces`);
        if (!ws || ws.mountPropagation !== "Bidirectional") {
          fail(where, `${state}/workspaces needs its own mount with mountPropagation Bidirectional, or a restarted daemon finds its sessions empty`);
        }
        if (!mounts.some((m) => m.mountPath === state)) fail(where, `sessions.state_dir ${state} is on the container's own filesystem`);
      }
      const drainS = (config.shutdown?.drain_timeout_ms ?? 30000) / 1000;
      const grace = pod.terminationGracePeriodSeconds ?? 30;
      if (grace < drainS + 10) {
        fail(where, `terminationGracePeriodSeconds ${grace} leaves under 10 s after shutdown.drain_timeout_ms (${drainS} s) for the teardown`);
      }
    }

    // The Secret holds every file the pod mounts from it.
    for (const m of mounts.filter((m) => m.subPath && volumes.get(m.name)?.secret)) {
      const secret = named(docs, "Secret", volumes.get(m.name).secret.secretName);
      if (!secret) {
        if (byKind(docs, "Secret").length > 0) fail(where, `no Secret ${volumes.get(m.name).secret.secretName}`);
        continue;
      }
      const data = secretData(secret.value);
      if (!(m.subPath in data)) fail(secret.where, `no ${m.subPath}, which ${where} mounts at ${m.mountPath}`);
      if (m.mountPath === keysFile && extractDir && m.subPath in data) {
        fs.writeFileSync(path.join(extractDir, "keys.json"), data[m.subPath], { mode: 0o600 });
      }
    }

    // Services select these pods, on a port the container names.
    const labels = value.spec.template.metadata?.labels ?? {};
    const portNames = new Set((container.ports ?? []).map((p) => p.name));
    for (const svc of byKind(docs, "Service")) {
      const selector = svc.value.spec?.selector ?? {};
      if (!Object.entries(selector).every(([k, v]) => labels[k] === v)) continue;
      for (const p of svc.value.spec?.ports ?? []) {
        if (typeof p.targetPort === "string" && !portNames.has(p.targetPort)) fail(svc.where, `targetPort ${p.targetPort}: no such container port`);
      }
    }
  }
}

// ---- main -----------------------------------------------------------------

const argv = process.argv.slice(2);
let extractDir = null;
if (argv[0] === "--extract") {
  extractDir = argv[1];
  argv.splice(0, 2);
}
if (argv.length === 0) {
  console.error("usage: node validate.mjs [--extract DIR] FILE.yaml...");
  process.exit(2);
}
const docs = argv.flatMap(readDocuments).filter(({ value }) => value.kind !== "Kustomization");
docs.forEach(schemaCheck);
typeCheck(docs);
cubicleChecks(docs, extractDir);
for (const f of failures) console.error(f);
console.log(`${docs.length} object(s) in ${argv.length} file(s): ${failures.length === 0 ? "valid" : `${failures.length} problem(s)`}`);
process.exit(failures.length === 0 ? 0 : 1);
