#include "core/model/tokenizer_transformers.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "core/common/error.h"
#include "core/common/file_text.h"
#include "core/common/json_text.h"
#include "core/common/runaway_guard.h"
#include "core/model/tokenizer_bpe.h"
#include "core/model/tokenizer_json_check.h"
#include "core/python/interpreter.h"

#include <pybind11/stl.h>

namespace py = pybind11;

namespace kvscope::model {
namespace {

// Loading and calling transformers. Nothing may reach the network (a folder is all there is), and a Rust
// panic inside tokenizers (pyo3's PanicException derives from BaseException) must come back as an error
// like any other, never end the process.
constexpr const char* kTransformersSource = R"PY(
import os
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

class TokenizerFailure(Exception):
    pass

def guarded(call):
    try:
        return call()
    except Exception:
        raise
    except BaseException as e:  # a panic in the Rust library
        raise TokenizerFailure("%s: %s" % (type(e).__name__, e)) from None

def transformers_module():
    try:
        import transformers
    except ImportError as e:
        raise TokenizerFailure("the embedded Python cannot import transformers (%s); run scripts/setup_deps.sh "
                               "(`make deps`), which installs scripts/requirements-embedded.txt into "
                               ".deps/embedded-venv" % e) from None
    transformers.logging.set_verbosity_error()
    return transformers

# tokenizers names a component it cannot read only by its Rust enum; say which field of tokenizer.json it is.
COMPONENTS = {"Normalizer": "normalizer", "PreTokenizer": "pre_tokenizer", "Model": "model",
              "PostProcessor": "post_processor", "Decoder": "decoder"}

def explain(path, message):
    import json, re
    found = re.search(r"untagged enum (Normalizer|PreTokenizer|Model|PostProcessor|Decoder)", message)
    if not found:
        return message
    field = COMPONENTS[found.group(1)]
    try:
        with open(os.path.join(path, "tokenizer.json"), encoding="utf-8") as f:
            value = json.dumps(json.load(f).get(field))
    except Exception:
        value = "(unreadable)"
    if len(value) > 200:
        value = value[:200] + "..."
    return "tokenizer.json: field '%s' is not a component tokenizers %s knows: %s (%s)" % (
        field, __import__("tokenizers").__version__, value, message)

def load(path):
    transformers = transformers_module()
    try:
        tok = guarded(lambda: transformers.AutoTokenizer.from_pretrained(path, local_files_only=True))
    except Exception as e:
        raise TokenizerFailure(explain(path, "%s: %s" % (type(e).__name__, e))) from None
    sample = guarded(lambda: tok("a", add_special_tokens=True)["input_ids"])
    bare = guarded(lambda: tok("a", add_special_tokens=False)["input_ids"])
    # BOS is what the post-processor puts before a text, whether or not tokenizer_config.json names it.
    adds_bos = len(sample) > len(bare) and len(bare) > 0 and sample[0] != bare[0] and sample[1:len(bare) + 1] == bare
    bos_id = tok.bos_token_id if tok.bos_token_id is not None else (sample[0] if adds_bos else None)
    specials = sorted(set(tok.all_special_ids) | set(getattr(tok, "added_tokens_decoder", {}).keys()))
    backend = getattr(tok, "backend_tokenizer", None)
    parts = []
    if backend is not None:
        parts.append(type(backend.model).__name__)
        for label, part in (("normalizer", backend.normalizer), ("pre-tokenizer", backend.pre_tokenizer),
                            ("decoder", backend.decoder)):
            if part is not None:
                parts.append("%s %s" % (label, type(part).__name__))
    return {
        "tokenizer": tok,
        "pipeline": ", ".join(parts),
        "class": type(tok).__name__,
        "version": transformers.__version__,
        "vocab_size": len(tok),
        "bos_id": -1 if bos_id is None else int(bos_id),
        "eos_id": -1 if tok.eos_token_id is None else int(tok.eos_token_id),
        "adds_bos": bool(adds_bos),
        "added": [(int(i), tok.convert_ids_to_tokens(int(i))) for i in specials],
    }

def encode(tok, text, add_special_tokens, parse_special):
    return guarded(lambda: tok(text, add_special_tokens=add_special_tokens,
                               split_special_tokens=not parse_special)["input_ids"])

def encode_offsets(tok, text, add_special_tokens, parse_special):
    # Character offsets of the text per token (a fast tokenizer's offsets mapping; (0, 0) for added ones).
    out = guarded(lambda: tok(text, add_special_tokens=add_special_tokens, split_special_tokens=not parse_special,
                              return_offsets_mapping=True))
    return out["input_ids"], [(int(a), int(b)) for a, b in out["offset_mapping"]]

def decode(tok, ids):
    return guarded(lambda: tok.decode(ids, skip_special_tokens=False))

def piece(tok, id):
    # A token as it reads inside a text: decoders strip the space that starts a whole text (Metaspace, Strip),
    # so the token is decoded after a copy of itself and the copy's text is cut off.
    alone = decode(tok, [id])
    return decode(tok, [id, id])[len(alone):]
)PY";

py::dict helpers() { return python::helper_namespace("transformers_tokenizer", kTransformersSource); }

// Ids generation stops at: generation_config.json's eos_token_id (one id or a list, what transformers'
// generate stops at), the tokenizer's EOS, and added tokens that end a turn (<|im_end|>, <|eot_id|>, ...), as
// for GGUF files.
std::set<int> generation_config_eos(const std::filesystem::path& dir) {
  std::set<int> out;
  const auto path = dir / "generation_config.json";
  const auto text = read_file_text(path);
  if (!text) return out;
  const auto json = parse_json_text(*text, path.string());
  if (!json.is_object() || !json.contains("eos_token_id")) return out;
  const auto& eos = json["eos_token_id"];
  if (eos.is_number_integer()) out.insert(eos.get<int>());
  if (eos.is_array())
    for (const auto& id : eos)
      if (id.is_number_integer()) out.insert(id.get<int>());
  return out;
}

class TransformersTokenizer final : public Tokenizer {
 public:
  TransformersTokenizer(py::object tokenizer, int vocab_size, int bos_id, int eos_id, bool adds_bos,
                        std::set<int> end_ids)
      : tokenizer_(new py::object(std::move(tokenizer))),
        vocab_size_(vocab_size),
        bos_id_(bos_id),
        eos_id_(eos_id),
        adds_bos_(adds_bos),
        end_ids_(std::move(end_ids)) {}

  ~TransformersTokenizer() override {
    python::Gil gil;
    delete tokenizer_;
  }

  std::vector<int> encode(std::string_view text, bool parse_special) const override {
    return call_encode(text, false, parse_special);
  }
  std::vector<int> encode_prompt(std::string_view text, bool parse_special) const override {
    return call_encode(text, true, parse_special);
  }
  Encoding encode_with_bytes(std::string_view text, bool parse_special) const override {
    return call_encode_offsets(text, false, parse_special);
  }
  Encoding encode_prompt_with_bytes(std::string_view text, bool parse_special) const override {
    return call_encode_offsets(text, true, parse_special);
  }
  std::string decode(const std::vector<int>& ids) const override {
    python::Gil gil;
    try {
      return helpers()["decode"](*tokenizer_, ids).cast<std::string>();
    } catch (py::error_already_set& e) {
      throw Error("transformers could not decode the ids: " + python::describe(e, {}).text);
    }
  }
  std::string token_text(int id) const override {
    python::Gil gil;
    try {
      return helpers()["piece"](*tokenizer_, id).cast<std::string>();
    } catch (py::error_already_set& e) {
      throw Error("transformers could not decode token " + std::to_string(id) + ": " + python::describe(e, {}).text);
    }
  }
  int vocab_size() const override { return vocab_size_; }
  int bos_id() const override { return bos_id_; }
  int eos_id() const override { return eos_id_; }
  bool add_bos() const override { return adds_bos_; }
  bool is_end_of_generation(int id) const override { return id == eos_id_ || end_ids_.count(id) > 0; }

 private:
  std::vector<int> call_encode(std::string_view text, bool add_special_tokens, bool parse_special) const {
    python::Gil gil;
    try {
      return helpers()["encode"](*tokenizer_, py::str(text.data(), text.size()), add_special_tokens, parse_special)
          .cast<std::vector<int>>();
    } catch (py::error_already_set& e) {
      throw Error("transformers could not tokenize the text: " + python::describe(e, {}).text);
    }
  }

  // transformers' offsets count characters of the Python string; the bytes of UTF-8 `text` they start at.
  Encoding call_encode_offsets(std::string_view text, bool add_special_tokens, bool parse_special) const {
    std::pair<std::vector<int>, std::vector<std::pair<size_t, size_t>>> result;
    {
      python::Gil gil;
      try {
        result = helpers()["encode_offsets"](*tokenizer_, py::str(text.data(), text.size()), add_special_tokens,
                                             parse_special)
                     .cast<decltype(result)>();
      } catch (py::error_already_set& e) {
        throw Error("transformers could not tokenize the text with offsets: " + python::describe(e, {}).text);
      }
    }
    std::vector<size_t> byte_of_char;
    for (size_t pos = 0; pos < text.size(); pos += static_cast<size_t>(unicode::decode_utf8(text, pos).length))
      byte_of_char.push_back(pos);
    byte_of_char.push_back(text.size());
    auto byte_at = [&](size_t character) { return byte_of_char[std::min(character, byte_of_char.size() - 1)]; };
    Encoding out;
    out.ids = std::move(result.first);
    for (const auto& [begin, end] : result.second) out.bytes.push_back({byte_at(begin), byte_at(std::max(begin, end))});
    if (out.bytes.size() != out.ids.size())
      throw Error("transformers gave " + std::to_string(out.bytes.size()) + " offsets for " +
                  std::to_string(out.ids.size()) + " tokens");
    return out;
  }

  py::object* tokenizer_;  // freed under the GIL
  int vocab_size_, bos_id_, eos_id_;
  bool adds_bos_;
  std::set<int> end_ids_;
};

// The bounds of the guarded load: the environment's KVSCOPE_TOKENIZER_LOAD_SECONDS and
// KVSCOPE_TOKENIZER_LOAD_MEMORY_MIB where set (a positive number), else 30 s and the larger of 2 GiB and 64 times
// tokenizer.json's size (transformers holds a few copies of the vocabulary; real files stay far below).
long positive_setting(const char* name, long fallback) {
  const char* text = std::getenv(name);
  if (!text || !*text) return fallback;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (*end != '\0' || value <= 0)
    throw UsageError(std::string(name) + "=" + text + " is not a positive whole number");
  return value;
}

RunawayGuard guard_tokenizer_load(const std::filesystem::path& tokenizer_json) {
  std::error_code ec;
  const uint64_t file_mib = std::filesystem::file_size(tokenizer_json, ec) >> 20;
  const long seconds = positive_setting("KVSCOPE_TOKENIZER_LOAD_SECONDS", 30);
  const long mib = positive_setting("KVSCOPE_TOKENIZER_LOAD_MEMORY_MIB", static_cast<long>(std::max<uint64_t>(2048, 64 * file_mib)));
  return RunawayGuard(tokenizer_json.string() + ": transformers' tokenizer load (bounds: KVSCOPE_TOKENIZER_LOAD_SECONDS=" +
                          std::to_string(seconds) + ", KVSCOPE_TOKENIZER_LOAD_MEMORY_MIB=" + std::to_string(mib) + ")",
                      std::chrono::seconds(seconds), static_cast<uint64_t>(mib) << 20);
}

}  // namespace

LoadedTokenizer load_transformers_tokenizer(const std::filesystem::path& dir) {
  check_tokenizer_files(dir);
  python::Gil gil;
  py::dict loaded;
  try {
    helpers()["transformers_module"]();  // the import is slow and not the file's doing: outside the guard
    const RunawayGuard guard = guard_tokenizer_load(dir / "tokenizer.json");
    loaded = helpers()["load"](dir.string());
  } catch (py::error_already_set& e) {
    throw Error(dir.string() + ": transformers could not load the folder's tokenizer: " + python::describe(e, dir).text);
  }
  std::set<int> end_ids = generation_config_eos(dir);
  for (const auto& [id, text] : loaded["added"].cast<std::vector<std::pair<int, std::string>>>())
    if (is_end_of_turn_text(text)) end_ids.insert(id);
  const int vocab_size = loaded["vocab_size"].cast<int>();
  LoadedTokenizer out;
  const auto pipeline = loaded["pipeline"].cast<std::string>();
  out.description = "transformers " + loaded["version"].cast<std::string>() + " " +
                    loaded["class"].cast<std::string>() + (pipeline.empty() ? "" : " (" + pipeline + ")");
  out.tokenizer = std::make_unique<TransformersTokenizer>(
      loaded["tokenizer"], vocab_size, loaded["bos_id"].cast<int>(), loaded["eos_id"].cast<int>(),
      loaded["adds_bos"].cast<bool>(), std::move(end_ids));
  return out;
}

}  // namespace kvscope::model
