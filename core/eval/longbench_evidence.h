#pragma once
// LongBench's evidence (issue 35): every occurrence of a reference answer in a record's context.
#include <string>
#include <vector>

#include "core/eval/evidence.h"
#include "core/eval/longbench.h"

namespace kvscope::eval {

// Bytes of `prompt` (the filled prompt format, `question` its tail after the context) where an answer occurs in
// the context, kind "answer": each answer (trimmed), ASCII letters compared without case (LongBench's QA F1
// lowers both sides, so "paris" in the context is the answer "Paris"; other bytes exactly), as a whole word: no
// letter or digit (nor a non-ASCII byte) just before or after it, so "Quill" is not found in "Quillon" nor "12"
// in "2012". Each place counts once. Searching the text rather than the answer's token ids is what makes the rule hold for every
// tokenizer: an answer has other tokens inside a text than alone (SentencePiece marks a word start with '▁'
// only after a space, so an answer at a line start matches neither "answer" nor " answer" encoded; byte-level
// BPE merges differently after punctuation). prepare_prompt then takes every token that holds a byte of an
// occurrence, from each token's exact bytes of the prompt (Tokenizer::encode_with_bytes). Empty when the
// context is not in the prompt.
std::vector<EvidenceText> longbench_answer_evidence(const std::string& prompt, const std::string& question,
                                                    const LongBenchRecord& record);

}  // namespace kvscope::eval
