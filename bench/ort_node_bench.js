#!/usr/bin/env node
// ONNX Runtime's CPU provider from npm (onnxruntime-node), for machines whose Python has no onnxruntime: times
// MODEL.onnx on INPUT.npy the way bench/cpu_infer_baseline.py --ort does (all graph optimisations, intra-op
// threads = --threads or ORT's default), prints the median/min/max ms per batch and writes the output as .npy.
//
//   NODE_PATH=/work/ortnode/node_modules node bench/ort_node_bench.js MODEL.onnx INPUT.npy \
//     [--threads N] [--warmup N] [--iterations N] [--output Y.npy]
const fs = require("fs");
const ort = require("onnxruntime-node");

function parseArgs(argv) {
  const options = { threads: 0, warmup: 5, iterations: 30, output: null, files: [] };
  for (let i = 0; i < argv.length; ++i) {
    const a = argv[i];
    if (a === "--threads") options.threads = Number(argv[++i]);
    else if (a === "--warmup") options.warmup = Number(argv[++i]);
    else if (a === "--iterations") options.iterations = Number(argv[++i]);
    else if (a === "--output") options.output = argv[++i];
    else options.files.push(a);
  }
  if (options.files.length !== 2) throw new Error("usage: ort_node_bench.js MODEL.onnx INPUT.npy [options]");
  return options;
}

// A little-endian f32 C-order .npy (what numpy.save writes for float32 arrays).
function readNpy(path) {
  const bytes = fs.readFileSync(path);
  const headerLength = bytes.readUInt16LE(8);
  const header = bytes.toString("latin1", 10, 10 + headerLength);
  if (!header.includes("'<f4'") || header.includes("'fortran_order': True"))
    throw new Error(path + ": expected a little-endian float32 C-order array, header " + header);
  const shape = header.match(/'shape': \(([^)]*)\)/)[1].split(",").filter((s) => s.trim()).map(Number);
  const start = 10 + headerLength;
  const data = new Float32Array(bytes.buffer.slice(bytes.byteOffset + start, bytes.byteOffset + bytes.length));
  return { shape, data };
}

function writeNpy(path, shape, data) {
  let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + shape.join(", ") + (shape.length === 1 ? "," : "") + "), }";
  header += " ".repeat(64 - ((10 + header.length + 1) % 64)) + "\n";
  const prefix = Buffer.alloc(10);
  Buffer.from("\x93NUMPY", "latin1").copy(prefix);
  prefix[6] = 1;
  prefix.writeUInt16LE(header.length, 8);
  fs.writeFileSync(path, Buffer.concat([prefix, Buffer.from(header, "latin1"), Buffer.from(data.buffer, data.byteOffset, data.byteLength)]));
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const sessionOptions = { executionProviders: ["cpu"], graphOptimizationLevel: "all" };
  if (o.threads) sessionOptions.intraOpNumThreads = o.threads;
  const session = await ort.InferenceSession.create(o.files[0], sessionOptions);
  const x = readNpy(o.files[1]);
  const feeds = { [session.inputNames[0]]: new ort.Tensor("float32", x.data, x.shape) };
  let y;
  for (let i = 0; i < o.warmup; ++i) y = await session.run(feeds);
  const ms = [];
  for (let i = 0; i < o.iterations; ++i) {
    const t0 = process.hrtime.bigint();
    y = await session.run(feeds);
    ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  ms.sort((a, b) => a - b);
  const median = ms[Math.floor(ms.length / 2)];
  const batch = x.shape[0];
  console.log(`ort-node ${require("onnxruntime-node/package.json").version} cpu ${o.files[0]} batch ${batch}: ` +
              `${median.toFixed(2)} ms per batch (median; min ${ms[0].toFixed(2)}, max ${ms[ms.length - 1].toFixed(2)}) = ` +
              `${(batch * 1000 / median).toFixed(0)} items/s`);
  if (o.output) {
    const out = y[session.outputNames[0]];
    writeNpy(o.output, out.dims, out.data);
  }
}

main().catch((e) => {
  console.error(e.message || e);
  process.exit(1);
});
