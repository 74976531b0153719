// Links loom::distributed from the installed package, as a user's data-parallel program would,
// and runs as a job of one process (started without a launcher): the session starts MPI, the
// world's collectives answer, and run() returns the body's status.
#include <cstdio>
#include <span>

#include "loom/distributed/communicator.hpp"

int main(int argc, char** argv) {
  return loom::distributed::run(argc, argv, [](loom::distributed::communicator& world) {
    const auto ranks = world.all_gather(static_cast<std::uint64_t>(world.rank()));
    int seed = world.rank() == 0 ? 42 : 0;
    world.broadcast(std::span(&seed, 1));
    world.barrier();
    if (world.size() != 1 || ranks.size() != 1 || ranks[0] != 0 || seed != 42) {
      std::fprintf(stderr, "distributed consumer: wrong answers from a one-process world\n");
      return 1;
    }
    std::printf("distributed consumer: a world of %d process, collectives answered\n", world.size());
    return 0;
  });
}
