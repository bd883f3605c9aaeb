#include "core/trace/run_evidence.h"

#include "core/common/error.h"
#include "core/trace/hdf5_util.h"

namespace kvscope::trace {

std::optional<std::vector<eval::EvidenceSpan>> read_run_evidence(const std::filesystem::path& trace,
                                                                 const std::string& run) {
  h5::silence_errors();
  const std::string p = trace.string();
  const h5::Handle file = h5::open_read_only(p);
  if (!file.valid()) throw Error("cannot open trace file '" + p + "' (HDF5: " + h5::last_error() + ")");
  const std::string group = "runs/" + run;
  if (!h5::exists(file, group)) throw UsageError("trace file '" + p + "' has no run named '" + run + "'");
  if (!h5::exists(file, group + "/evidence")) return std::nullopt;
  const std::string where = "trace file '" + p + "', /" + group + "/evidence";
  auto open = [&](const std::string& name) {
    if (!h5::exists(file, group + "/evidence/" + name)) throw Error(where + " has no dataset '" + name + "'");
    return h5::Handle(
        h5::check(H5Dopen2(file, (group + "/evidence/" + name).c_str(), H5P_DEFAULT), where + "/" + name));
  };
  try {
    const h5::Handle positions = open("positions"), kinds = open("kinds");
    const auto dims = h5::dataset_dims(positions);
    const auto kind_dims = h5::dataset_dims(kinds);
    if (dims.size() != 2 || dims[1] != 2 || kind_dims.size() != 1 || kind_dims[0] != dims[0])
      throw Error(where + ": positions must be [n][2] and kinds [n] with the same n");
    const std::vector<int32_t> values = h5::read_ints(positions);
    const std::vector<std::string> names = h5::read_strings(kinds);
    if (values.size() != 2 * names.size()) throw Error(where + ": positions and kinds hold different numbers of spans");
    std::vector<eval::EvidenceSpan> spans;
    for (std::size_t i = 0; i < names.size(); ++i) {
      eval::EvidenceSpan s{values[2 * i], values[2 * i + 1], names[i]};
      if (s.first < 0 || s.last < s.first)
        throw Error(where + "/positions: span " + std::to_string(i) + " is [" + std::to_string(s.first) + ", " +
                    std::to_string(s.last) + "], expected 0 <= first <= last");
      spans.push_back(std::move(s));
    }
    return spans;
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.rfind("trace file", 0) == 0) throw;
    throw Error(where + ": " + what);
  }
}

}  // namespace kvscope::trace
