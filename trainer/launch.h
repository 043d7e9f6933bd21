// perch-train --nproc N: runs N ranks of one data-parallel job on this node, as child
// processes of this one (each re-executes /proc/self/exe with the same arguments plus its rank).
//
// This process serves the ranks' TCPStore on loopback (so no port has to be chosen), forwards
// SIGTERM/SIGINT (the stop flag) to every rank, and, when a rank dies (a signal or an exit code
// other than 0 and 85), sends SIGTERM to the others, then SIGKILL to what is left after
// `kill_grace_s`. Returns the first failing rank's exit code (128 + signal for a signal), else
// 85 if any rank checkpointed, else 0.
//
// Thread-safety: call once, from the main thread.
#ifndef PERCH_TRAINER_LAUNCH_H_
#define PERCH_TRAINER_LAUNCH_H_

#include <signal.h>

#include <atomic>
#include <string>
#include <vector>

namespace perch::trainer {

int LaunchLocalRanks(int nproc, const std::vector<std::string>& args,
                     const std::atomic<int>* stop_signal, double kill_grace_s = 60);

// The arguments each of `nproc` ranks on a node of `cores` gets on top of the user's: ranks share
// the cores. Left to their defaults (one intra-op thread and one loader thread per core each), N
// ranks would run N times too many threads: on a 16-core GPU node two ranks of a CPU run trained
// at 14.5 images/s where one process did 463. So unless told otherwise (`threads` or `workers`
// above 0, or OMP_NUM_THREADS set: `omp_set`), each rank gets max(1, cores / nproc) of each, as
// torchrun gives each process one OpenMP thread.
std::vector<std::string> RankShareArgs(int threads, int workers, int nproc, int cores,
                                       bool omp_set);

// The signals that stop a run (a checkpoint, exit 85): SIGTERM and SIGINT. perch-train takes them
// in one thread and blocks them in every other (main.cc); a child that is not a rank gets them
// unblocked (SendHints).
sigset_t StopSignals();

}  // namespace perch::trainer

#endif  // PERCH_TRAINER_LAUNCH_H_
