#include "perchd/flags.h"

#include <CLI/CLI.hpp>
#include <iostream>
#include <string>
#include <vector>

#include "perch/cli_exit.h"
#include "perch/version.h"

namespace perch {
namespace {

// What --help shows after a flag that takes a value.
std::string TypeName(std::string_view kind) {
  if (kind == "Size") return "SIZE";
  if (kind == "Time") return "DURATION";
  if (kind == "Count") return "N";
  if (kind == "Real") return "NUMBER";
  return "TEXT";
}

}  // namespace

std::variant<CommandLine, int> ParseCommandLine(int argc, const char* const* argv) {
  CLI::App app{
      "perchd: mount a Pelican/OSDF federation namespace read-only, with a persistent node cache.\n"
      "Example: perchd --cache-dir /var/cache/perch --cache-size 50G "
      "osdf:///ospool/uc-shared/public /osdf\n"
      "Every flag but --config, --takeover and --namespace-token overrides the configuration "
      "file's key of the same meaning (docs/configuration.md)."};
  app.set_version_flag("--version", std::string("perchd ") + kVersion);
  std::string config_file;
  app.add_option("--config", config_file, "TOML configuration file (flags override it)")
      ->check(CLI::ExistingFile);
  // One option per row with a flag; the text after it is applied after the file.
  const std::vector<ConfigKey>& table = ConfigKeyTable();
  std::vector<std::string> values(table.size());
  std::vector<CLI::Option*> options(table.size(), nullptr);
  for (size_t i = 0; i < table.size(); ++i) {
    const ConfigKey& k = table[i];
    if (k.flag.empty()) continue;
    std::string help(k.help);
    if (!k.key.empty()) help += " [key " + std::string(k.key) + "]";
    if (!k.is_switch()) help += " (default " + k.default_text() + ")";
    options[i] =
        k.is_switch()
            ? app.add_flag(std::string(k.flag))->description(help)
            : app.add_option(std::string(k.flag), values[i], help)->type_name(TypeName(k.kind));
  }
  CommandLine line;
  // The default since digests are checked without it (issue 41): kept so
  // that command lines written before still start.
  bool verify_digests = false;
  app.add_flag("--verify-digests", verify_digests,
               "check every object against its digest (the default; see --no-verify-digests)");
  app.add_flag("--takeover", line.takeover,
               "take the mounts over from the perchd serving the same cache directory, without "
               "unmounting (restart, upgrade)");
  std::vector<std::string> namespace_tokens;
  app.add_option("--namespace-token", namespace_tokens,
                 "/PREFIX=FILE: the token for namespaces at or below PREFIX, as [tokens] "
                 "(repeatable; the only way an opaque token is sent)")
      ->allow_extra_args(false);  // one value per --namespace-token: positionals follow
  std::string url, mountpoint;
  app.add_option("FEDERATION_URL", url,
                 "pelican://host/path, osdf:///path or http(s)://host:port/path");
  app.add_option("MOUNTPOINT", mountpoint, "an existing empty directory");
  if (auto rc = cli::Parse(app, argc, argv)) return *rc;

  DaemonConfig& cfg = line.config;
  try {
    if (!config_file.empty()) ApplyConfigFile(config_file, &cfg);
    if (!url.empty() || !mountpoint.empty()) {
      cfg.mounts.clear();  // the arguments name the one mount
      cfg.federation_url = url;
      cfg.mountpoint = mountpoint;
    }
    for (const std::string& t : namespace_tokens) AddNamespaceTokenFlag(t, &cfg.namespace_tokens);
    for (size_t i = 0; i < table.size(); ++i) {
      if (options[i] == nullptr || options[i]->count() == 0) continue;
      const ConfigKey& k = table[i];
      k.set(cfg, k.is_switch() ? (k.SwitchValue() ? "true" : "false") : values[i],
            std::string(k.LongFlag()));
    }
    if (verify_digests) cfg.verify_digests = true;
    if (MountsOf(cfg).empty()) {
      throw ConfigError(
          "FEDERATION_URL and MOUNTPOINT (or [[mount]] tables in --config) are required (see "
          "--help)");
    }
    Validate(cfg);
  } catch (const ConfigError& e) {
    std::cerr << "perchd: " << e.what() << "\n";
    return cli::kExitUsage;
  }
  return line;
}

}  // namespace perch
