// ONNX Runtime's side of scripts/bench_vs_torch.py: runs models exported by
// scripts/bench_ort_cases.py in onnxruntime-node (CPU execution provider) with the timing protocol
// of bench/bench_vs_torch.cpp, and prints one JSON line.
//
//   node scripts/bench_ort.js SPEC.json
//
// SPEC (written by bench_ort_cases.py): {"ort_dir": folder whose node_modules holds
// onnxruntime-node, "threads": N, "protocol": {...}, "mode": "call" | "decode", ...}.
//   call:   "model", "inputs": {name: {"file", "type", "dims"}}, "output_file": the first output's
//           values of the first call, as float32, for the caller to check against PyTorch's.
//   decode: "prefill" and "step" models, "prompt" (token ids), "new_tokens", "layers": greedy
//           decoding through the exported KV-cached step, as the PyTorch case does it.
'use strict';
const fs = require('fs');
const path = require('path');

const spec = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const ort = require(path.join(spec.ort_dir, 'node_modules', 'onnxruntime-node'));

const sessionOptions = {
  executionProviders: ['cpu'],
  intraOpNumThreads: spec.threads,
  interOpNumThreads: 1,
  executionMode: 'sequential',
  graphOptimizationLevel: 'all',
  // subnormals flushed to zero, as loom's float executors and the PyTorch side do
  extra: {session: {set_denormal_as_zero: '1'}},
};

function readTensor(t) {
  const bytes = fs.readFileSync(t.file);
  const copy = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
  const data = t.type === 'int64' ? new BigInt64Array(copy) : new Float32Array(copy);
  return new ort.Tensor(t.type, data, t.dims);
}

const now = () => Number(process.hrtime.bigint()) / 1e9;
const cpuNow = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
};
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

// bench_vs_torch.cpp's protocol: warm-up calls (at least warmup_calls and warmup_seconds), then
// `repetitions` timed repetitions of as many calls as fill repetition_seconds.
async function timeCalls(p, call) {
  const warm = [];
  const w0 = now();
  while (warm.length < p.warmup_calls || now() - w0 < p.warmup_seconds) {
    const c0 = now();
    await call();
    warm.push(now() - c0);
  }
  const perCall = median(warm.length > 1 ? warm.slice(1) : warm);
  const iters = Math.max(1, Math.round(p.repetition_seconds / perCall));
  const reps = [];
  const cpu0 = cpuNow();
  const all0 = now();
  for (let r = 0; r < p.repetitions; ++r) {
    const t0 = now();
    for (let i = 0; i < iters; ++i) await call();
    reps.push((now() - t0) / iters);
  }
  const cpuPerWall = (cpuNow() - cpu0) / (now() - all0);
  return {median_s: median(reps), min_s: Math.min(...reps), iters, warmup_calls: warm.length, reps_s: reps,
          cpu_per_wall: cpuPerWall};
}

async function runCall() {
  const session = await ort.InferenceSession.create(spec.model, sessionOptions);
  const feeds = {};
  for (const [name, t] of Object.entries(spec.inputs)) feeds[name] = readTensor(t);
  const first = await session.run(feeds);
  const out = first[session.outputNames[0]];
  fs.writeFileSync(spec.output_file, Buffer.from(out.data.buffer, out.data.byteOffset, out.data.byteLength));
  return timeCalls(spec.protocol, () => session.run(feeds));
}

function argmaxLastRow(logits) {  // logits [1, t, V]: the id of the largest value of the last row
  const v = logits.dims[2];
  const row = logits.data.subarray(logits.data.length - v);
  let best = 0;
  for (let i = 1; i < v; ++i)
    if (row[i] > row[best]) best = i;
  return best;
}

async function runDecode() {
  const prefill = await ort.InferenceSession.create(spec.prefill, sessionOptions);
  const step = await ort.InferenceSession.create(spec.step, sessionOptions);
  const prompt = new ort.Tensor('int64', BigInt64Array.from(spec.prompt.map(BigInt)), [1, spec.prompt.length]);
  const generate = async () => {
    const t0 = now();
    let out = await prefill.run({tokens: prompt});
    let token = argmaxLastRow(out.logits);
    const tokens = [token];
    let past = [];
    for (let l = 0; l < spec.layers; ++l) past.push(out[`present_k${l}`], out[`present_v${l}`]);
    const t1 = now();
    for (let s = 1; s < spec.new_tokens; ++s) {
      const feeds = {
        token: new ort.Tensor('int64', BigInt64Array.from([BigInt(token)]), [1, 1]),
        pos: new ort.Tensor('int64', BigInt64Array.from([BigInt(spec.prompt.length + s - 1)]), [1]),
      };
      for (let l = 0; l < spec.layers; ++l) {
        feeds[`past_k${l}`] = past[2 * l];
        feeds[`past_v${l}`] = past[2 * l + 1];
      }
      out = await step.run(feeds);
      token = argmaxLastRow(out.logits);
      tokens.push(token);
      past = [];
      for (let l = 0; l < spec.layers; ++l) past.push(out[`present_k${l}`], out[`present_v${l}`]);
    }
    return {tokens, prefill: t1 - t0, decode: now() - t1};
  };
  const p = spec.protocol;
  const w0 = now();
  for (let warm = 0; warm < p.warmup_calls || now() - w0 < p.warmup_seconds; ++warm) await generate();
  const perToken = [], prefills = [], totals = [];
  let last;
  const cpu0 = cpuNow();
  const all0 = now();
  for (let r = 0; r < p.repetitions; ++r) {
    last = await generate();
    perToken.push(last.decode / (spec.new_tokens - 1));
    prefills.push(last.prefill);
    totals.push(last.prefill + last.decode);
  }
  const cpuPerWall = (cpuNow() - cpu0) / (now() - all0);
  return {median_s: median(perToken), min_s: Math.min(...perToken), reps_s: perToken, prefill_s: median(prefills),
          total_s: median(totals), tokens: last.tokens.length, steps: spec.new_tokens - 1, token_ids: last.tokens,
          cpu_per_wall: cpuPerWall};
}

(async () => {
  const r = spec.mode === 'decode' ? await runDecode() : await runCall();
  console.log(JSON.stringify({...r, ort_version: require(path.join(spec.ort_dir, 'node_modules', 'onnxruntime-node',
                                                                      'package.json')).version}));
})().catch((e) => {
  console.error(`bench_ort.js: ${e.stack || e}`);
  process.exit(1);
});
