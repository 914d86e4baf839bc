#!/usr/bin/env node
// ONNX Runtime side of the benchmark: the CPU execution provider that onnxruntime-node
// ships, all graph optimisations on, intra-op threads = --threads, one inter-op thread.
//   node ort_bench.js MODEL.onnx --input FILE.pb [--input ...] [--threads N] [--iters N] [--warmup N]
//                     [--profile]
// Prints one JSON line: {"median_ms":..,"p90_ms":..,"threads":..,"iters":..,"ort_version":..}.
// --profile: then runs N more iterations with ONNX Runtime's profiler and prints, on stderr,
// the kernel time per node of ORT's optimised graph (its names: often the original node's
// output name, with suffixes such as _nchwc), slowest first, as `kiln bench --profile`
// does for Kiln, so the two can be read side by side.
'use strict';
const fs = require('fs');
const ort = require('onnxruntime-node');
const {readTensorProto} = require('./ort_tensor');

function usage(problem) {
  process.stderr.write(`ort_bench: ${problem}\nusage: node ort_bench.js MODEL.onnx --input FILE.pb ` +
                       `[--input ...] [--threads N] [--iters N] [--warmup N] [--profile]\n`);
  process.exit(2);
}

async function main() {
  const args = process.argv.slice(2);
  let model = null, threads = 1, iters = 50, warmup = 5, profile = false;
  const inputs = [];
  for (let i = 0; i < args.length; ++i) {
    const a = args[i];
    const value = () => { if (i + 1 >= args.length) usage(`${a} needs a value`); return args[++i]; };
    if (a === '--input') inputs.push(value());
    else if (a === '--threads') threads = parseInt(value(), 10);
    else if (a === '--iters') iters = parseInt(value(), 10);
    else if (a === '--warmup') warmup = parseInt(value(), 10);
    else if (a === '--profile') profile = true;
    else if (a === '-h' || a === '--help') {
      process.stdout.write(fs.readFileSync(__filename, 'utf8').split('\n').slice(1, 10).map((l) => l.replace(/^\/\/ ?/, '')).join('\n') + '\n');
      process.exit(0);
    }
    else if (a.startsWith('-')) usage(`unknown flag ${a}`);
    else if (model === null) model = a;
    else usage(`unexpected argument ${a}`);
  }
  if (model === null) usage('no model given');
  if (!(threads >= 1) || !(iters >= 1)) usage('--threads and --iters must be positive');
  const options = {
    executionProviders: ['cpu'], graphOptimizationLevel: 'all', executionMode: 'sequential',
    intraOpNumThreads: threads, interOpNumThreads: 1,
  };
  const session = await ort.InferenceSession.create(model, options);
  const feeds = {};
  for (const path of inputs) {
    const {name, tensor} = readTensorProto(path);
    if (!session.inputNames.includes(name)) throw new Error(`${path}: the model has no input named '${name}'`);
    feeds[name] = tensor;
  }
  for (const name of session.inputNames) {
    if (!(name in feeds)) throw new Error(`no --input given for model input '${name}'`);
  }
  for (let i = 0; i < warmup; ++i) await session.run(feeds);
  const times = [];
  for (let i = 0; i < iters; ++i) {
    const t0 = process.hrtime.bigint();
    await session.run(feeds);
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  times.sort((a, b) => a - b);
  const pick = (q) => times[Math.min(times.length - 1, Math.floor(q * times.length))];
  const version = require('onnxruntime-node/package.json').version;
  console.log(JSON.stringify({median_ms: +pick(0.5).toFixed(4), p90_ms: +pick(0.9).toFixed(4), threads, iters, ort_version: version}));
  if (profile) await profileNodes(model, options, feeds, warmup, iters);
}

// A second session with the profiler on (so the timed runs above are not slowed by it):
// ORT writes a Chrome-trace JSON file; its per-node "kernel_time" events are summed here.
async function profileNodes(model, options, feeds, warmup, iters) {
  const os = require('os');
  const path = require('path');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ort-profile-'));
  const session = await ort.InferenceSession.create(model, {...options, enableProfiling: true, profileFilePrefix: path.join(dir, 'p')});
  for (let i = 0; i < warmup + iters; ++i) await session.run(feeds);
  if (typeof session.endProfiling === 'function') session.endProfiling();
  await session.release();
  const files = fs.readdirSync(dir).filter((f) => f.endsWith('.json'));
  if (files.length !== 1) throw new Error(`profiling wrote ${files.length} files in ${dir}`);
  const events = JSON.parse(fs.readFileSync(path.join(dir, files[0]), 'utf8'));
  fs.rmSync(dir, {recursive: true, force: true});
  const nodes = new Map();  // name -> {us, count, op}
  for (const e of events) {
    if (e.cat !== 'Node' || !e.name.endsWith('_kernel_time')) continue;
    const name = e.name.slice(0, -'_kernel_time'.length);
    const n = nodes.get(name) || {us: 0, count: 0, op: (e.args && e.args.op_name) || '?'};
    n.us += e.dur;
    n.count += 1;
    nodes.set(name, n);
  }
  // The warm-up runs are profiled too: divide by the runs each node was seen in.
  const rows = [...nodes.entries()].map(([name, n]) => ({name, op: n.op, ms: n.us / n.count / 1000}));
  rows.sort((a, b) => b.ms - a.ms);
  const total = rows.reduce((sum, r) => sum + r.ms, 0);
  let out = `profile: ${rows.length} nodes, ${warmup + iters} runs, ${total.toFixed(4)} ms per run in kernels\n`;
  out += ' rank       ms/run       %   cum %  node\n';
  let cum = 0;
  rows.forEach((r, i) => {
    cum += r.ms;
    out += `${String(i + 1).padStart(5)} ${r.ms.toFixed(4).padStart(12)} ${(100 * r.ms / total).toFixed(1).padStart(6)}% ` +
           `${(100 * cum / total).toFixed(1).padStart(6)}%  ${r.name} (${r.op})\n`;
  });
  process.stderr.write(out);
}

main().catch((e) => { process.stderr.write(`ort_bench: ${e.message}\n`); process.exit(1); });
