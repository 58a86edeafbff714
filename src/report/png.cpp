#include "report/png.h"

#include <spawn.h>
#include <sys/wait.h>

#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"
#include "io/atomic_file.h"

extern char** environ;

namespace fs = std::filesystem;

namespace selq::report {

std::vector<std::string> write_pngs(const std::vector<std::pair<std::string, std::string>>& pictures,
                                    const std::string& dir) {
  fs::create_directories(dir);
  std::vector<std::string> out;
  for (const auto& [name, svg] : pictures) {
    const std::string svg_path = (fs::path(dir) / (name + ".svg")).string();
    const std::string png_path = (fs::path(dir) / (name + ".png")).string();
    io::write_file_atomic(svg_path, svg);
    // Twice the SVG's size: sharp on high-density screens.
    std::vector<std::string> args = {"rsvg-convert", "--zoom", "2", "--background-color", "white", "-o", png_path,
                                     svg_path};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    if (posix_spawnp(&pid, "rsvg-convert", nullptr, nullptr, argv.data(), environ) != 0)
      throw_bad_input("a PNG needs rsvg-convert (Debian package librsvg2-bin)");
    int st = 0;
    if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      if (WIFEXITED(st) && WEXITSTATUS(st) == 127) throw_bad_input("a PNG needs rsvg-convert (Debian package librsvg2-bin)");
      throw_bad_input(fmt::format("rsvg-convert failed on {}", svg_path));
    }
    out.push_back(png_path);
  }
  return out;
}

}  // namespace selq::report
