#pragma once
// Every layer allocation by name, with its parameters. allocation.cpp lists them in one table; an
// allocation file that is not listed there is not reachable by name. Adding one (d2o, dynamickv, cake):
// write allocation_<name>.cpp defining `AllocationInfo <name>_allocation_info()`, declare it below and
// add one line to the table in allocation.cpp.
//
// Allocation parameters are set through the policy that uses the allocation
// ("snapkv:allocation=pyramid,beta=20") and exist only when it is chosen (drop_unchosen_allocation_params),
// so their names share one namespace with a scored policy's own parameters: a name a built-in policy
// already declares (e.g. `window`) means the policy's value; a user's file may not declare one
// (resolve_allocation_params). Pick names that say what they are (`cake_tau1`, not `t1`) unless sharing is
// intended.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/policy/allocation.h"

namespace kvscope::policy {

struct AllocationInfo {
  std::string name;
  std::string summary;    // one line
  std::string reference;  // the paper
  std::vector<ParamSpec> params;
  std::function<std::unique_ptr<LayerAllocation>(const PolicyParams&)> make;
};

const std::vector<AllocationInfo>& all_allocations();
const AllocationInfo& find_allocation(const std::string& name);  // throws UsageError listing the valid names
// The allocations that declare `spec` (same name and doc, as with_allocation_params copies them). Empty
// for a policy's own parameter, also one named like an allocation parameter: that name means the policy's.
std::vector<std::string> allocations_declaring(const ParamSpec& spec);

AllocationInfo uniform_allocation_info();    // allocation.cpp
AllocationInfo pyramid_allocation_info();    // allocation_pyramid.cpp
AllocationInfo d2o_allocation_info();        // allocation_d2o.cpp
AllocationInfo dynamickv_allocation_info();  // allocation_dynamickv.cpp
AllocationInfo cake_allocation_info();       // allocation_cake.cpp
AllocationInfo per_layer_allocation_info();  // allocation_per_layer.cpp

}  // namespace kvscope::policy
