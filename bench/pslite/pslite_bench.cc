// ps-lite push+pull benchmark peer for `petrel bench ps --peer-cmd`.
//
// Role comes from ps-lite's env (DMLC_ROLE = scheduler | server | worker).
// Usage: pslite_bench BYTES ITERS
//
// Servers: KVServer<float>; push sums the pushed values into the stored value
// of each key, pull answers with the stored value (shared SArray, no copy).
// Workers: one key per server (key = start of that server's key range), each
// holding BYTES/S bytes of f32. 3 untimed warmup iterations, then ITERS timed
// iterations of Wait(ZPush) + Wait(ZPull). Each worker prints one JSON line:
//   {"mbps": X, "p50_ms": Y, "p99_ms": Z}
// where mbps = (bytes pushed + bytes pulled) / timed seconds / 1e6.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "ps/ps.h"

using namespace ps;

namespace {

const int kWarmup = 3;

struct SumHandle {
  std::unordered_map<Key, SArray<float>> store;

  void operator()(const KVMeta& req, const KVPairs<float>& data,
                  KVServer<float>* server) {
    size_t n = data.keys.size();
    if (req.push) {
      // lens may be absent if every key has exactly one value
      size_t off = 0;
      for (size_t i = 0; i < n; ++i) {
        size_t len = data.lens.empty() ? 1 : static_cast<size_t>(data.lens[i]);
        CHECK_LE(off + len, data.vals.size()) << "bad push lens";
        Key key = data.keys[i];
        auto it = store.find(key);
        if (it == store.end()) {
          SArray<float> v(len, 0.0f);
          it = store.emplace(key, v).first;
        }
        SArray<float>& v = it->second;
        CHECK_EQ(v.size(), len) << "value length changed for key " << key;
        float* __restrict__ dst = v.data();
        const float* __restrict__ src = data.vals.data() + off;
        for (size_t j = 0; j < len; ++j) dst[j] += src[j];
        off += len;
      }
      CHECK_EQ(off, data.vals.size()) << "bad push lens";
    }
    if (req.pull) {
      KVPairs<float> res;
      res.keys = data.keys;  // shares the request buffer
      res.lens.resize(n);
      if (n == 1) {
        auto it = store.find(data.keys[0]);
        CHECK(it != store.end()) << "pull of unknown key " << data.keys[0];
        res.vals = it->second;  // zero-copy: shares the stored buffer
        res.lens[0] = static_cast<int>(it->second.size());
      } else {
        size_t total = 0;
        for (size_t i = 0; i < n; ++i) {
          auto it = store.find(data.keys[i]);
          CHECK(it != store.end()) << "pull of unknown key " << data.keys[i];
          total += it->second.size();
        }
        res.vals.resize(total);
        size_t off = 0;
        for (size_t i = 0; i < n; ++i) {
          const SArray<float>& v = store.find(data.keys[i])->second;
          memcpy(res.vals.data() + off, v.data(), v.size() * sizeof(float));
          res.lens[i] = static_cast<int>(v.size());
          off += v.size();
        }
      }
      server->Response(req, res);
    } else {
      server->Response(req);
    }
  }
};

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(std::ceil(q * v.size()));
  if (rank < 1) rank = 1;
  if (rank > v.size()) rank = v.size();
  return v[rank - 1];
}

// Every element of out must lie in [lo, hi].
bool CheckRange(const SArray<float>& out, double lo, double hi,
                const char* what, int iter) {
  for (size_t j = 0; j < out.size(); ++j) {
    double x = out[j];
    if (!(x >= lo && x <= hi)) {
      fprintf(stderr,
              "pslite_bench: %s check failed at iter %d elem %zu: "
              "got %g, want in [%g, %g]\n",
              what, iter, j, x, lo, hi);
      return false;
    }
  }
  return true;
}

int RunWorker(long long bytes, int iters) {
  const int num_servers = NumServers();
  const int num_workers = NumWorkers();
  const size_t per_key = static_cast<size_t>(bytes) / num_servers / sizeof(float);
  if (per_key == 0) {
    fprintf(stderr, "pslite_bench: BYTES=%lld too small for %d servers\n",
            bytes, num_servers);
    return 2;
  }
  const auto& ranges = Postoffice::Get()->GetServerKeyRanges();
  CHECK_EQ(static_cast<int>(ranges.size()), num_servers);

  SArray<Key> keys(num_servers);
  SArray<int> lens(num_servers);
  for (int s = 0; s < num_servers; ++s) {
    keys[s] = ranges[s].begin();
    lens[s] = static_cast<int>(per_key);
  }
  const size_t total_elems = per_key * num_servers;
  SArray<float> vals(total_elems, 1.0f);
  SArray<float> out;
  SArray<int> out_lens;

  KVWorker<float> kv(0, 0);
  std::vector<double> lat_ms;
  lat_ms.reserve(iters);
  double total_s = 0.0;
  bool ok = true;
  const double max_val = static_cast<double>(num_workers) * (kWarmup + iters);

  for (int i = 1; i <= kWarmup + iters; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    kv.Wait(kv.ZPush(keys, vals, lens));
    kv.Wait(kv.ZPull(keys, &out, &out_lens));
    auto t1 = std::chrono::steady_clock::now();
    if (i > kWarmup) {
      double s = std::chrono::duration<double>(t1 - t0).count();
      total_s += s;
      lat_ms.push_back(s * 1e3);
    }
    // Shape check.
    if (out.size() != total_elems || out_lens.size() != keys.size()) {
      fprintf(stderr, "pslite_bench: pulled %zu vals / %zu lens, want %zu / %zu\n",
              out.size(), out_lens.size(), total_elems, keys.size());
      ok = false;
      break;
    }
    for (int s = 0; s < num_servers; ++s) {
      if (out_lens[s] != lens[s]) {
        fprintf(stderr, "pslite_bench: pulled len[%d]=%d, want %d\n", s,
                out_lens[s], lens[s]);
        ok = false;
      }
    }
    if (!ok) break;
    // Value check: own pushes so far are included; other workers may be ahead
    // or behind, so with one worker it is exact, otherwise a range.
    double lo = static_cast<double>(i);
    double hi = num_workers == 1 ? lo : max_val;
    if (!CheckRange(out, lo, hi, "per-iteration", i)) {
      ok = false;
      break;
    }
  }

  // Wait for all workers to finish pushing, then check the exact final value.
  Postoffice::Get()->Barrier(0, kWorkerGroup);
  if (ok) {
    kv.Wait(kv.ZPull(keys, &out, &out_lens));
    if (out.size() != total_elems ||
        !CheckRange(out, max_val, max_val, "final", kWarmup + iters)) {
      ok = false;
    }
  }
  if (!ok) return 1;

  const double moved = 2.0 * static_cast<double>(total_elems * sizeof(float)) * iters;
  const double mbps = total_s > 0 ? moved / total_s / 1e6 : 0.0;
  printf("{\"mbps\": %.3f, \"p50_ms\": %.4f, \"p99_ms\": %.4f}\n", mbps,
         Percentile(lat_ms, 0.50), Percentile(lat_ms, 0.99));
  fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char* argv[]) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s BYTES ITERS  (role from DMLC_ROLE)\n", argv[0]);
    return 2;
  }
  char* end = nullptr;
  long long bytes = strtoll(argv[1], &end, 10);
  if (*end != '\0' || bytes <= 0) {
    fprintf(stderr, "pslite_bench: bad BYTES '%s'\n", argv[1]);
    return 2;
  }
  long iters = strtol(argv[2], &end, 10);
  if (*end != '\0' || iters <= 0 || iters > 100000000) {
    fprintf(stderr, "pslite_bench: bad ITERS '%s'\n", argv[2]);
    return 2;
  }

  // StartAsync + explicit barrier *after* the KVServer exists. With plain
  // Start(0) (barrier inside) a worker released from the barrier can push to
  // a server whose van has not yet seen its own barrier release; the van's
  // receive thread then blocks waiting for the (not yet created) server
  // customer and aborts after 5 s ("timeout (5 sec) to wait App 0 customer 0
  // ready"), which happened under load with 3 servers + 3 workers.
  StartAsync(0, argv[0]);
  KVServer<float>* server = nullptr;
  SumHandle* handle = nullptr;
  if (IsServer()) {
    handle = new SumHandle();
    server = new KVServer<float>(0);
    server->set_request_handle(
        [handle](const KVMeta& req, const KVPairs<float>& data,
                 KVServer<float>* srv) { (*handle)(req, data, srv); });
  }
  Postoffice::Get()->Barrier(0, kWorkerGroup + kServerGroup + kScheduler);
  int rc = 0;
  if (IsWorker()) rc = RunWorker(bytes, static_cast<int>(iters));
  // Global barrier: servers stay up until every worker is done.
  Finalize(0, true);
  delete server;
  delete handle;
  return rc;
}
