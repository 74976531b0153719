// The main of test_distributed: MPI for the whole run, then Catch2 (its implementation is
// compiled here, apart from the tests).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "loom/distributed/communicator.hpp"

namespace {
loom::distributed::communicator* world = nullptr;
}

loom::distributed::communicator& test_world() {
  return *world;
}

int main(int argc, char** argv) {
  loom::distributed::session mpi(argc, argv);
  world = &mpi.world();
  world->set_timeout(20);  // a rank that fails a REQUIRE and leaves does not hold the others for long
  return Catch::Session().run(argc, argv);
}
