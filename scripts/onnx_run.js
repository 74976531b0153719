// Runs an ONNX model in ONNX Runtime (onnxruntime-node, CPU execution provider) for loom's
// export tests: feeds from a safetensors file, every output to another.
//
//   node scripts/onnx_run.js ORT_DIR MODEL.onnx INPUTS.safetensors OUTPUTS.safetensors
//   node scripts/onnx_run.js ORT_DIR --greedy SPEC.json OUTPUTS.safetensors
//
// ORT_DIR is the folder whose node_modules holds onnxruntime-node. Tensors are F32, F64, I64 or
// BOOL. --greedy decodes through an exported KV-cached step: SPEC is
//   {"step": model, "feeds": safetensors file(s) of the fixed feeds (the encoder's memory,
//    lengths; tensors the step does not take are left out),
//    "tokens": input name of the step's token ids [B, 1], "positions": input name of their
//    positions [B, 1] (optional; step k is at position k), "logits": output name [B, 1, V],
//    "states": [input names of the cache states], "present_prefix": "present.",
//    "empty_states": {"name": [dims with 0 for the past length]},
//    "start": [first token per sequence], "end": token that stops a sequence, "max_new": N}
// and writes "tokens" [B, max_new] (the end token repeated after a sequence ends), as loom's
// greedy decoding does.
'use strict';
const fs = require('fs');
const path = require('path');

const ort = require(path.join(process.argv[2], 'node_modules', 'onnxruntime-node'));

const types = {F32: ['float32', Float32Array, 4], F64: ['float64', Float64Array, 8],
               I64: ['int64', BigInt64Array, 8], BOOL: ['bool', Uint8Array, 1]};

function readSafetensors(file) {
  const bytes = fs.readFileSync(file);
  const n = Number(bytes.readBigUInt64LE(0));
  const header = JSON.parse(bytes.subarray(8, 8 + n).toString('utf8'));
  const base = 8 + n;
  const out = {};
  for (const [name, t] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const [type, Array_, size] = types[t.dtype];
    const [begin, end] = t.data_offsets;
    const copy = bytes.buffer.slice(bytes.byteOffset + base + begin, bytes.byteOffset + base + end);
    out[name] = new ort.Tensor(type, new Array_(copy, 0, (end - begin) / size), t.shape);
  }
  return out;
}

function writeSafetensors(file, tensors) {
  const names = Object.keys(tensors).sort();
  const header = {};
  const parts = [];
  let offset = 0;
  for (const name of names) {
    const t = tensors[name];
    const dtype = Object.keys(types).find((k) => types[k][0] === t.type);
    if (!dtype) throw new Error(`output ${name}: type ${t.type} is not written`);
    const data = Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength);
    header[name] = {dtype, shape: t.dims.map(Number), data_offsets: [offset, offset + data.length]};
    parts.push(data);
    offset += data.length;
  }
  let text = JSON.stringify(header);
  while ((8 + Buffer.byteLength(text)) % 8) text += ' ';
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(Buffer.byteLength(text)));
  fs.writeFileSync(file, Buffer.concat([len, Buffer.from(text), ...parts]));
}

const options = {executionProviders: ['cpu'], intraOpNumThreads: 1, graphOptimizationLevel: 'all'};

async function runOnce(model, inputs, outputs) {
  const session = await ort.InferenceSession.create(model, options);
  const result = await session.run(readSafetensors(inputs));
  const out = {};
  for (const name of session.outputNames) out[name] = result[name];
  writeSafetensors(outputs, out);
}

function argmaxRows(logits, batch) {
  const v = logits.dims[logits.dims.length - 1];
  const best = [];
  for (let b = 0; b < batch; ++b) {
    let k = 0;
    for (let j = 1; j < v; ++j) if (logits.data[b * v + j] > logits.data[b * v + k]) k = j;
    best.push(k);
  }
  return best;
}

async function greedy(specFile, outputs) {
  const spec = JSON.parse(fs.readFileSync(specFile, 'utf8'));
  const session = await ort.InferenceSession.create(spec.step, options);
  const fixed = {};
  for (const file of [].concat(spec.feeds))
    for (const [name, t] of Object.entries(readSafetensors(file)))
      if (session.inputNames.includes(name)) fixed[name] = t;
  const batch = spec.start.length;
  const states = {};
  for (const name of spec.states) {
    const dims = spec.empty_states[name];
    states[name] = new ort.Tensor('float32', new Float32Array(0), dims);
  }
  let current = spec.start.slice();
  const done = new Array(batch).fill(false);
  const tokens = new BigInt64Array(batch * spec.max_new);
  for (let step = 0; step < spec.max_new; ++step) {
    const feeds = Object.assign({}, fixed, states);
    feeds[spec.tokens] = new ort.Tensor('int64', BigInt64Array.from(current.map(BigInt)), [batch, 1]);
    if (spec.positions) feeds[spec.positions] = new ort.Tensor('int64', new BigInt64Array(batch).fill(BigInt(step)), [batch, 1]);
    const result = await session.run(feeds);
    const next = argmaxRows(result[spec.logits], batch);
    for (let b = 0; b < batch; ++b) {
      if (done[b]) next[b] = spec.end;
      tokens[b * spec.max_new + step] = BigInt(next[b]);
      if (next[b] === spec.end) done[b] = true;
    }
    for (const name of spec.states) states[name] = result[spec.present_prefix + name];
    current = next;
    if (done.every((d) => d)) {
      for (let s = step + 1; s < spec.max_new; ++s)
        for (let b = 0; b < batch; ++b) tokens[b * spec.max_new + s] = BigInt(spec.end);
      break;
    }
  }
  writeSafetensors(outputs, {tokens: new ort.Tensor('int64', tokens, [batch, spec.max_new])});
}

(async () => {
  if (process.argv[3] === '--greedy') await greedy(process.argv[4], process.argv[5]);
  else await runOnce(process.argv[3], process.argv[4], process.argv[5]);
})().catch((e) => {
  console.error(`onnx_run.js: ${e.message}`);
  process.exit(1);
});
