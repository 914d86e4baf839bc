// Sequences and optionals as files: ONNX SequenceProto / OptionalProto <-> Tensor values of
// kind kSequence / kOptional* (the test data of sequence ops, and `kiln run`'s files).
#include "absl/strings/str_cat.h"
#include "kiln/common/status.h"
#include "kiln/compiler/frontend.h"
#include "onnx/onnx-data_pb.h"
#include "onnx/onnx_pb.h"

namespace kiln {
namespace {

absl::StatusOr<Tensor> FromSequence(const onnx::SequenceProto& proto) {
  if (proto.elem_type() != onnx::SequenceProto::TENSOR) {
    return absl::InvalidArgumentError("a sequence of other than tensors is not supported");
  }
  std::vector<Tensor> elements;
  DType dtype = DType::kUndefined;
  for (const onnx::TensorProto& t : proto.tensor_values()) {
    KILN_ASSIGN_OR_RETURN(Tensor element, ParseTensorProto(t.SerializeAsString()));
    dtype = element.dtype();
    elements.push_back(std::move(element));
  }
  return Tensor::Sequence(dtype, std::move(elements));
}

absl::StatusOr<Tensor> FromOptional(const onnx::OptionalProto& proto, ValueKind kind) {
  if (proto.has_tensor_value()) {
    KILN_ASSIGN_OR_RETURN(Tensor value, ParseTensorProto(proto.tensor_value().SerializeAsString()));
    return Tensor::Optional(ValueKind::kOptional, value.dtype(), &value);
  }
  if (proto.has_sequence_value()) {
    KILN_ASSIGN_OR_RETURN(Tensor value, FromSequence(proto.sequence_value()));
    return Tensor::Optional(ValueKind::kOptionalSequence, value.element_dtype(), &value);
  }
  if (proto.elem_type() != onnx::OptionalProto::UNDEFINED && proto.elem_type() != onnx::OptionalProto::TENSOR &&
      proto.elem_type() != onnx::OptionalProto::SEQUENCE) {
    return absl::InvalidArgumentError("an optional of other than a tensor or a sequence is not supported");
  }
  return Tensor::Optional(kind, DType::kUndefined, nullptr);
}

void ToTensorProto(const Tensor& tensor, onnx::TensorProto* proto) {
  proto->ParseFromString(SerializeTensorProto(tensor, ""));
}

void ToSequenceProto(const Tensor& value, onnx::SequenceProto* proto) {
  proto->set_elem_type(onnx::SequenceProto::TENSOR);
  for (const Tensor& element : value.elements()) ToTensorProto(element, proto->add_tensor_values());
}

}  // namespace

absl::StatusOr<Tensor> ParseValueProto(std::string_view bytes, ValueKind kind, std::string* name) {
  const int size = static_cast<int>(bytes.size());
  switch (kind) {
    case ValueKind::kTensor: return ParseTensorProto(bytes, name);
    case ValueKind::kSequence: {
      onnx::SequenceProto proto;
      if (!proto.ParseFromArray(bytes.data(), size)) return absl::InvalidArgumentError("not a valid SequenceProto");
      if (name != nullptr) *name = proto.name();
      return FromSequence(proto);
    }
    case ValueKind::kOptional:
    case ValueKind::kOptionalSequence: {
      onnx::OptionalProto proto;
      if (!proto.ParseFromArray(bytes.data(), size)) return absl::InvalidArgumentError("not a valid OptionalProto");
      if (name != nullptr) *name = proto.name();
      return FromOptional(proto, kind);
    }
  }
  return absl::InvalidArgumentError("unknown value kind");
}

std::string SerializeValueProto(const Tensor& value, const std::string& name) {
  switch (value.kind()) {
    case ValueKind::kTensor: return SerializeTensorProto(value, name);
    case ValueKind::kSequence: {
      onnx::SequenceProto proto;
      proto.set_name(name);
      ToSequenceProto(value, &proto);
      return proto.SerializeAsString();
    }
    case ValueKind::kOptional:
    case ValueKind::kOptionalSequence: {
      onnx::OptionalProto proto;
      proto.set_name(name);
      const bool sequence = value.kind() == ValueKind::kOptionalSequence;
      proto.set_elem_type(sequence ? onnx::OptionalProto::SEQUENCE : onnx::OptionalProto::TENSOR);
      if (!value.elements().empty()) {
        if (sequence) {
          ToSequenceProto(value.elements()[0], proto.mutable_sequence_value());
        } else {
          ToTensorProto(value.elements()[0], proto.mutable_tensor_value());
        }
      }
      return proto.SerializeAsString();
    }
  }
  return "";
}

}  // namespace kiln
