"""Read and write SentencePiece model protobufs (`sentencepiece_model_pb2`, needs `protobuf`)."""

from __future__ import annotations

from core.errors import InputError

NORMAL = 1  # ModelProto.SentencePiece.Type of a learned piece (the only type LinguaForge reads or adds)


def model_proto_class() -> type:
    """Return the generated ModelProto class shipped with sentencepiece."""
    from sentencepiece import sentencepiece_model_pb2

    return sentencepiece_model_pb2.ModelProto


def parse_model_proto(data: bytes, source: str = "model") -> object:
    """Return a ModelProto parsed from `data`.

    Raises InputError (never a protobuf traceback) when the bytes are not a SentencePiece model.
    """
    from google.protobuf.message import DecodeError

    proto = model_proto_class()()
    try:
        proto.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise InputError(f"{source}: not a SentencePiece model ({exc}).") from exc
    if len(proto.pieces) == 0:
        raise InputError(f"{source}: not a SentencePiece model (no pieces).")
    return proto
