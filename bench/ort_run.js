#!/usr/bin/env node
// Runs a model once with ONNX Runtime (CPU, all graph optimisations) and writes its outputs
// as TensorProtos output_0.pb, output_1.pb, ... (the model's output order), as `kiln run`
// does, so tests can hold Kiln's outputs to ONNX Runtime's.
//   node ort_run.js MODEL.onnx --input FILE.pb [--input ...] --output-dir DIR [--optimization LEVEL]
//   node ort_run.js --cases ROOT [--skip CASE ...]
// LEVEL: ORT's graphOptimizationLevel (disabled, basic, extended, all; default all).
// --cases runs every ROOT/CASE/model.onnx on its test_data_set_0/input_N.pb in one process and
// writes output_N.pb beside them (the node-test layout); a case ONNX Runtime refuses is named
// on stdout as "ORT refuses CASE: message" and the rest go on.
'use strict';
const fs = require('fs');
const path = require('path');
const ort = require('onnxruntime-node');
const {readTensorProto, writeTensorProto} = require('./ort_tensor');

function usage(problem) {
  process.stderr.write(`ort_run: ${problem}\nusage: node ort_run.js MODEL.onnx --input FILE.pb [--input ...] --output-dir DIR [--optimization LEVEL]\n` +
                       `       node ort_run.js --cases ROOT [--skip CASE ...]\n`);
  process.exit(2);
}

async function runModel(model, inputs, outputDir, optimization = 'all') {
  const session =
      await ort.InferenceSession.create(model, {executionProviders: ['cpu'], graphOptimizationLevel: optimization});
  const feeds = {};
  for (const file of inputs) {
    const {name, tensor} = readTensorProto(file);
    if (!session.inputNames.includes(name)) throw new Error(`${file}: the model has no input named '${name}'`);
    feeds[name] = tensor;
  }
  for (const name of session.inputNames) {
    if (!(name in feeds)) throw new Error(`no --input given for model input '${name}'`);
  }
  const results = await session.run(feeds);
  fs.mkdirSync(outputDir, {recursive: true});
  session.outputNames.forEach((name, i) => writeTensorProto(path.join(outputDir, `output_${i}.pb`), name, results[name]));
}

async function runCases(root, skip) {
  for (const name of fs.readdirSync(root).sort()) {
    if (skip.includes(name)) continue;
    const data = path.join(root, name, 'test_data_set_0');
    if (!fs.existsSync(path.join(root, name, 'model.onnx'))) continue;
    const inputs = fs.readdirSync(data).filter((f) => /^input_\d+\.pb$/.test(f))
                       .sort((a, b) => parseInt(a.slice(6), 10) - parseInt(b.slice(6), 10))
                       .map((f) => path.join(data, f));
    try {
      await runModel(path.join(root, name, 'model.onnx'), inputs, data);
    } catch (e) {
      process.stdout.write(`ORT refuses ${name}: ${e.message.split('\n')[0]}\n`);
    }
  }
}

async function main() {
  const args = process.argv.slice(2);
  let model = null, outputDir = null, cases = null, optimization = 'all';
  const inputs = [], skip = [];
  for (let i = 0; i < args.length; ++i) {
    const a = args[i];
    const value = () => { if (i + 1 >= args.length) usage(`${a} needs a value`); return args[++i]; };
    if (a === '--input') inputs.push(value());
    else if (a === '--output-dir') outputDir = value();
    else if (a === '--cases') cases = value();
    else if (a === '--skip') skip.push(value());
    else if (a === '--optimization') optimization = value();
    else if (a.startsWith('-')) usage(`unknown flag ${a}`);
    else if (model === null) model = a;
    else usage(`unexpected argument ${a}`);
  }
  if (cases !== null) return runCases(cases, skip);
  if (model === null || outputDir === null) usage('a model and --output-dir are required');
  return runModel(model, inputs, outputDir, optimization);
}

main().catch((e) => { process.stderr.write(`ort_run: ${e.message}\n`); process.exit(1); });
