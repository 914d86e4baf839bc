// ONNX TensorProto files <-> onnxruntime-node tensors, for the bench and test scripts that
// feed ONNX Runtime the inputs Kiln gets (numpy_helper's .pb files) and keep its outputs.
'use strict';
const fs = require('fs');
const ort = require('onnxruntime-node');

// ONNX data_type -> ORT's type name and the typed array that holds it (strings: an Array of
// JS strings, kept in string_data as UTF-8). float16 travels as its bits (Node has no
// Float16Array before 24).
const TYPES = {
  1: ['float32', Float32Array], 2: ['uint8', Uint8Array], 3: ['int8', Int8Array], 4: ['uint16', Uint16Array],
  5: ['int16', Int16Array], 6: ['int32', Int32Array], 7: ['int64', BigInt64Array], 8: ['string', Array],
  9: ['bool', Uint8Array], 10: ['float16', Uint16Array], 11: ['float64', Float64Array], 12: ['uint32', Uint32Array],
  13: ['uint64', BigUint64Array],
};
const STRING = 8;
// float8 (17 to 20) and int4 / uint4 (21, 22) have no onnxruntime-node tensor type (int4 is
// declared but crashes the binding in 1.30): tests keep them inside the graph (Cast at its edges).

// Minimal protobuf reader for the ONNX TensorProto fields numpy_helper writes:
// dims (1), data_type (2), string_data (6), name (8), raw_data (9).
function readTensorProto(path) {
  const buf = fs.readFileSync(path);
  let pos = 0;
  const varint = () => {
    let result = 0n, shift = 0n;
    for (;;) {
      const b = buf[pos++];
      result |= BigInt(b & 0x7f) << shift;
      if ((b & 0x80) === 0) return result;
      shift += 7n;
    }
  };
  const dims = [];
  let dataType = 0, name = '', raw = null;
  const strings = [];
  while (pos < buf.length) {
    const key = Number(varint());
    const field = key >> 3, wire = key & 7;
    if (wire === 0) {
      const v = varint();
      if (field === 1) dims.push(Number(v));
      else if (field === 2) dataType = Number(v);
    } else if (wire === 2) {
      const len = Number(varint());
      const bytes = buf.subarray(pos, pos + len);
      pos += len;
      if (field === 1) {  // packed dims
        const saved = pos;
        let p = 0;
        while (p < bytes.length) {
          let r = 0n, s = 0n;
          for (;;) { const b = bytes[p++]; r |= BigInt(b & 0x7f) << s; if ((b & 0x80) === 0) break; s += 7n; }
          dims.push(Number(r));
        }
        pos = saved;
      } else if (field === 6) strings.push(bytes.toString('utf8'));
      else if (field === 8) name = bytes.toString('utf8');
      else if (field === 9) raw = bytes;
    } else if (wire === 5) pos += 4;
    else if (wire === 1) pos += 8;
    else throw new Error(`${path}: unsupported protobuf wire type ${wire}`);
  }
  if (dataType === STRING) return {name, tensor: new ort.Tensor('string', strings, dims)};
  if (raw === null && dims.includes(0)) raw = Buffer.alloc(0);  // proto3 leaves an empty raw_data out
  if (raw === null) throw new Error(`${path}: tensor has no raw_data (write it with numpy_helper.from_array)`);
  const copy = Uint8Array.from(raw).buffer;
  if (!TYPES[dataType]) throw new Error(`${path}: data type ${dataType} is not supported here`);
  const [type, Array] = TYPES[dataType];
  return {name, tensor: new ort.Tensor(type, new Array(copy), dims)};
}

function varintBytes(value) {
  const out = [];
  let v = BigInt(value);
  do {
    let b = Number(v & 0x7fn);
    v >>= 7n;
    if (v !== 0n) b |= 0x80;
    out.push(b);
  } while (v !== 0n);
  return out;
}

// Writes an ORT tensor as a TensorProto: dims (1), data_type (2), name (8), raw_data (9), or
// for strings string_data (6).
function writeTensorProto(path, name, tensor) {
  const code = Object.keys(TYPES).find((k) => TYPES[k][0] === tensor.type);
  if (code === undefined) throw new Error(`output '${name}': type ${tensor.type} is not supported here`);
  const parts = [];
  for (const d of tensor.dims) parts.push(Buffer.from([0x08, ...varintBytes(d)]));
  parts.push(Buffer.from([0x10, ...varintBytes(code)]));
  const nameBytes = Buffer.from(name, 'utf8');
  parts.push(Buffer.from([0x42, ...varintBytes(nameBytes.length)]), nameBytes);
  const data = tensor.data;
  if (tensor.type === 'string') {
    for (const text of data) {
      const bytes = Buffer.from(text, 'utf8');
      parts.push(Buffer.from([0x32, ...varintBytes(bytes.length)]), bytes);
    }
    fs.writeFileSync(path, Buffer.concat(parts));
    return;
  }
  const raw = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  parts.push(Buffer.from([0x4a, ...varintBytes(raw.length)]), raw);
  fs.writeFileSync(path, Buffer.concat(parts));
}

module.exports = {readTensorProto, writeTensorProto};
