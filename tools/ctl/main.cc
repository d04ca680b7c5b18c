// mrctl: metaroced's command-line client (tools/ctl/README.md).
#include <iostream>
#include <string>
#include <vector>

#include "tools/ctl/run.h"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  return metaroce::ctl::RunMrctl(args, std::cout, std::cerr);
}
