// environments/: an environments directory loaded — its layout, the
// revisions a reference picks, what it reports and leaves out — each
// revision's environment.json and python_path, its interpreter, its
// package index read from dist-info and egg-info metadata, requirements
// checked against that index, the host's interpreters found by name, and
// an R library's packages read from their DESCRIPTION files.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "environments/catalog.h"
#include "environments/host_python.h"
#include "environments/packages.h"
#include "environments/r_library.h"
#include "tests/support/temp_dir.h"

namespace cubicle::environments {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class EnvironmentsDir : public ::testing::Test {
 protected:
  void Write(const std::string& name, const std::string& text, fs::perms perms = fs::perms::owner_read |
                                                                                    fs::perms::owner_write) {
    fs::create_directories(fs::path(Path(name)).parent_path());
    std::ofstream(Path(name), std::ios::binary) << text;
    fs::permissions(Path(name), perms);
  }
  void Folder(const std::string& name) { fs::create_directories(Path(name)); }
  // A package's metadata folder in `folder`, as pip writes it.
  void DistInfo(const std::string& folder, const std::string& name, const std::string& version) {
    Write(absl::StrCat(folder, "/", name, "-", version, ".dist-info/METADATA"),
          absl::StrCat("Metadata-Version: 2.1\nName: ", name, "\nVersion: ", version,
                       "\nSummary: a package\n\nName: NotThis\n"));
  }
  std::string Path(const std::string& name) const { return root_ + "/" + name; }
  std::vector<std::string> Errors(const Catalog& c) const {
    std::vector<std::string> out;
    for (const LoadError& e : c.errors()) out.push_back(e.message.substr(root_.size() + 1));
    return out;
  }
  test_support::TempDir dir_;
  const std::string root_ = dir_.path();
};

TEST_F(EnvironmentsDir, RevisionsLoadAndReferencesPickThem) {
  Folder("sci/1");
  Folder("sci/2");
  Folder("sci/10");
  Folder("stats/3");
  Write("README.md", "files beside the folders are passed over");
  Folder(".staging/1");
  Catalog c = Catalog::Load(root_);
  EXPECT_THAT(Errors(c), IsEmpty());
  EXPECT_EQ(c.environments().size(), 2u);
  EXPECT_EQ(c.revisions(), 4u);
  absl::StatusOr<std::shared_ptr<const Environment>> latest = c.Find("sci");
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ((*latest)->revision, 10u);  // by number, not by name
  EXPECT_EQ((*latest)->Reference(), "sci@10");
  EXPECT_EQ((*latest)->prefix, Path("sci/10"));
  ASSERT_TRUE(c.Find("sci@2").ok());
  EXPECT_EQ((*c.Find("sci@2"))->revision, 2u);
  EXPECT_EQ(c.Find("ml").status().message(), "no environment named 'ml' (there are: sci, stats)");
  EXPECT_EQ(c.Find("sci@7").status().message(), "environment 'sci' has no revision 7 (it has 1, 2, 10)");
  EXPECT_TRUE(absl::IsInvalidArgument(c.Find("sci@x").status()));
  EXPECT_TRUE(absl::IsNotFound(Catalog().Find("sci").status()));
  EXPECT_THAT(std::string(Catalog().Find("sci").status().message()), HasSubstr("there are none"));
}

TEST_F(EnvironmentsDir, LayoutErrorsAreReportedAndTheRestServed) {
  Folder("good/1");
  Folder("Bad Name/1");
  Folder("empty");
  Folder("sci/latest");
  Folder("sci/01");
  Folder("sci/0");
  Folder("sci/2");
  fs::create_directory_symlink(Path("good"), Path("linked"));
  fs::create_directory_symlink(Path("sci/2"), Path("sci/3"));
  Catalog c = Catalog::Load(root_);
  EXPECT_THAT(Errors(c),
              ElementsAre(HasSubstr("Bad Name: is not an environment name"), HasSubstr("empty: holds no revision"),
                          HasSubstr("linked: is a symlink"),
                          "sci/0: is not a revision (a positive whole number without leading zeros: 1, 2, ...)",
                          HasSubstr("sci/01: is not a revision"), HasSubstr("sci/3: is a symlink"),
                          HasSubstr("sci/latest: is not a revision")));
  EXPECT_TRUE(c.Find("good@1").ok());
  EXPECT_TRUE(c.Find("sci@2").ok());
  EXPECT_EQ(c.revisions(), 2u);
}

TEST_F(EnvironmentsDir, AMissingDirectoryIsOneError) {
  Catalog c = Catalog::Load(Path("nope"));
  ASSERT_EQ(c.errors().size(), 1u);
  EXPECT_THAT(c.errors()[0].message, HasSubstr("ENOENT"));
  EXPECT_EQ(c.revisions(), 0u);
}

TEST_F(EnvironmentsDir, FoldersAreBounded) {
  for (int i = 1; i <= 5; ++i) Folder(absl::StrCat("e", i, "/1"));
  LoadOptions options;
  options.max_folders = 4;
  Catalog c = Catalog::Load(root_, options);
  EXPECT_LE(c.revisions(), 4u);
  EXPECT_THAT(Errors(c), ::testing::Contains(HasSubstr("more than 4 folders")));
}

TEST_F(EnvironmentsDir, PackagesAreIndexedFromTheirMetadata) {
  DistInfo("sci/1/lib/python3.11/site-packages", "NumPy", "1.26.4");
  DistInfo("sci/1/lib/python3.11/site-packages", "Py_YAML", "6.0");
  // An egg-info file is the metadata itself; an egg-info folder holds PKG-INFO.
  Write("sci/1/lib/python3.11/site-packages/six-1.16.0.egg-info",
        "Metadata-Version: 1.1\nName: six\nVersion: 1.16.0\n");
  Write("sci/1/lib/python3.11/site-packages/attrs-23.1.egg-info/PKG-INFO", "Name: attrs\r\nVersion: 23.1\r\n");
  // Metadata without a version, and a symlinked one, are passed over.
  Write("sci/1/lib/python3.11/site-packages/broken-1.dist-info/METADATA", "Name: broken\n");
  fs::create_directory_symlink(Path("sci/1/lib/python3.11/site-packages/NumPy-1.26.4.dist-info"),
                               Path("sci/1/lib/python3.11/site-packages/linked-9.dist-info"));
  // A pip --target folder, ahead of site-packages: its numpy is imported.
  DistInfo("sci/1/extra", "numpy", "2.0.0");
  Write("sci/1/environment.json", R"({"description": "science", "python_path": ["extra"]})");
  Catalog c = Catalog::Load(root_);
  ASSERT_THAT(Errors(c), IsEmpty());
  const Environment& env = **c.Find("sci");
  EXPECT_EQ(env.description, "science");
  EXPECT_THAT(env.site_packages, ElementsAre("lib/python3.11/site-packages"));
  EXPECT_THAT(env.python_path, ElementsAre("extra"));
  EXPECT_FALSE(env.own_interpreter);
  // Without an interpreter of its own, its site-packages are the host's to import.
  EXPECT_THAT(env.SandboxPythonPath(), ElementsAre("/env/extra", "/env/lib/python3.11/site-packages"));
  EXPECT_EQ(env.packages.size(), 4u);
  ASSERT_NE(env.packages.Find("numpy"), nullptr);
  EXPECT_EQ(env.packages.Find("numpy")->version, "2.0.0");
  EXPECT_EQ(env.packages.Find("numpy")->folder, "/env/extra");
  ASSERT_NE(env.packages.Find("py-yaml"), nullptr);
  EXPECT_EQ(env.packages.Find("py-yaml")->name, "Py_YAML");
  EXPECT_EQ(env.packages.Find("six")->version, "1.16.0");
  EXPECT_EQ(env.packages.Find("attrs")->version, "23.1");
  EXPECT_EQ(env.packages.Find("broken"), nullptr);
  EXPECT_EQ(env.packages.Find("linked"), nullptr);
}

TEST_F(EnvironmentsDir, AnInterpreterOfItsOwnIsAnExecutableBeneathThePrefix) {
  Write("own/1/bin/python3.11", "#!/bin/false\n", fs::perms::owner_all);
  fs::create_symlink("python3.11", Path("own/1/bin/python3"));  // as venvs and conda make it
  Write("own/1/pyvenv.cfg", "home = /usr/bin\ninclude-system-site-packages = true\n");
  Folder("own/1/lib/python3.11/site-packages");
  Folder("host/1/bin");
  fs::create_symlink("/usr/bin/python3", Path("host/1/bin/python3"));  // leaves the prefix
  Write("plain/1/bin/python3", "not executable\n");
  Catalog c = Catalog::Load(root_);
  ASSERT_THAT(Errors(c), IsEmpty());
  const Environment& own = **c.Find("own");
  EXPECT_TRUE(own.own_interpreter);
  EXPECT_TRUE(own.has_bin);
  EXPECT_TRUE(own.system_site_packages);
  EXPECT_THAT(own.SandboxPythonPath(), IsEmpty());  // its interpreter finds its site-packages itself
  const Environment& host = **c.Find("host");
  EXPECT_FALSE(host.own_interpreter);
  EXPECT_THAT(host.notes, ElementsAre(HasSubstr("bin/python3 leaves the environment's folder")));
  EXPECT_FALSE((*c.Find("plain"))->own_interpreter);
  EXPECT_FALSE((*c.Find("plain"))->system_site_packages);
}

TEST_F(EnvironmentsDir, EnvironmentJsonErrorsNameTheFileAndField) {
  Folder("a/1/site");
  fs::create_directory_symlink(Path("a/1/site"), Path("a/1/linked"));
  Write("a/1/file", "");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"python_path": ["../x"]})", "python_path[0]: path '../x'"},
      {R"({"python_path": ["/abs"]})", "python_path[0]: '/abs' is absolute"},
      {R"({"python_path": ["missing"]})", "python_path[0]: 'missing' does not exist in the environment's folder"},
      {R"({"python_path": ["linked"]})", "python_path[0]: 'linked' is a symlink"},
      {R"({"python_path": ["file"]})", "python_path[0]: 'file' is not a folder"},
      {R"({"python_path": ["site", "site"]})", "python_path[1]: 'site' is listed twice"},
      {R"({"python_path": "site"})", "python_path: expected an array"},
      {R"({"description": 7})", "description: expected a string"},
      {R"({"packages": []})", "packages: unknown key"},
      {R"({"description": )", "invalid JSON"},
  };
  for (const auto& [text, needle] : cases) {
    Write("a/1/environment.json", text);
    Catalog c = Catalog::Load(root_);
    ASSERT_EQ(c.errors().size(), 1u) << text;
    EXPECT_THAT(c.errors()[0].message, HasSubstr(absl::StrCat(Path("a/1/environment.json"), ": ", needle))) << text;
    EXPECT_EQ(c.revisions(), 0u);
  }
  fs::remove(Path("a/1/environment.json"));
  fs::create_symlink(Path("a/1/file"), Path("a/1/environment.json"));
  Catalog c = Catalog::Load(root_);
  ASSERT_EQ(c.errors().size(), 1u);
  EXPECT_THAT(c.errors()[0].message, HasSubstr("'environment.json' is a symlink"));
}

TEST(PackageMetadata, HeadersEndAtTheFirstEmptyLine) {
  std::optional<MetadataHeaders> h =
      ParseMetadataHeaders("Metadata-Version: 2.1\nname:  Foo \nVersion: 1.0\nDescription: x\n  more\n\nVersion: 9\n");
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->name, "Foo");
  EXPECT_EQ(h->version, "1.0");
  EXPECT_FALSE(ParseMetadataHeaders("Name: foo\n\nVersion: 1\n").has_value());
  EXPECT_FALSE(ParseMetadataHeaders("").has_value());
}

TEST(PackageIndex, TheFirstOfANameWinsAndRequirementsAreCheckedInOrder) {
  PackageIndex first, second;
  EXPECT_TRUE(first.Add({"NumPy", "1.9", "/a"}));
  EXPECT_FALSE(first.Add({"numpy", "2.0", "/b"}));
  EXPECT_TRUE(second.Add({"numpy", "2.0", "/b"}));
  EXPECT_TRUE(second.Add({"pandas", "2.2.0", "/b"}));
  std::vector<skills::Requirement> needs;
  for (const char* r : {"numpy>=1.10", "pandas", "scipy", "NUMPY-extra"}) needs.push_back(*skills::ParseRequirement(r));
  std::vector<UnmetRequirement> unmet = UnmetRequirements(needs, {&first, &second});
  ASSERT_EQ(unmet.size(), 3u);
  EXPECT_EQ(unmet[0].message, "package numpy not available (need >= 1.10, have 1.9)");
  EXPECT_EQ(unmet[0].installed, "1.9");
  EXPECT_EQ(unmet[1].message, "package scipy not available (not installed)");
  EXPECT_EQ(unmet[2].requirement.name, "numpy-extra");
  EXPECT_EQ(UnmetRequirements(needs, {&second, &first}).size(), 2u);  // numpy 2.0 first now
}

TEST(RDescription, PackageAndVersionOfTheFirstRecord) {
  std::optional<RDescription> d = ParseRDescription(
      "Package: data.table\nVersion:  1.14.8-1 \nTitle: Extension of\n  'data.frame'\nPackage: NotThis\n"
      "Built: R 4.2.2; x86_64-pc-linux-gnu; 2023-02-01; unix\n\nVersion: 9\n");
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->package, "data.table");
  EXPECT_EQ(d->version, "1.14.8-1");
  // A continuation line is not a field, and field names are case-sensitive.
  EXPECT_FALSE(ParseRDescription("Package: x1\nDescription: a\n Version: 1.0\n").has_value());
  EXPECT_FALSE(ParseRDescription("package: x1\nversion: 1.0\n").has_value());
  EXPECT_FALSE(ParseRDescription("Package: x1\n\nVersion: 1.0\n").has_value());
  EXPECT_TRUE(ParseRDescription("\r\nPackage: x1\r\nVersion: 1.0\r\n").has_value());
  EXPECT_FALSE(ParseRDescription("").has_value());
}

TEST_F(EnvironmentsDir, AnRLibrarysPackagesAreTheFoldersItsDescriptionsName) {
  auto description = [&](const std::string& folder, const std::string& package, const std::string& version) {
    Write(folder + "/DESCRIPTION", absl::StrCat("Package: ", package, "\nVersion: ", version, "\nLicense: GPL\n"));
  };
  description("site/jsonlite", "jsonlite", "1.8.4");
  description("site/data.table", "data.table", "1.14.8-1");
  description("site/Matrix", "Matrix", "1.5-3");
  description("site/renamed", "other", "1.0");  // library(renamed) would refuse it
  description("site/.hidden", ".hidden", "1.0");
  Folder("site/nodescription/R");
  Write("site/stray", "Package: stray\nVersion: 1.0\n");
  fs::create_directory_symlink(Path("site/jsonlite"), Path("site/linked"));
  description("base/jsonlite", "jsonlite", "0.9");
  description("base/stats", "stats", "4.2.2");

  PackageIndex index(skills::PackageKind::kR);
  ASSERT_TRUE(ScanRLibrary(Path("site"), "/usr/lib/R/site-library", &index).ok());
  ASSERT_TRUE(ScanRLibrary(Path("base"), "/usr/lib/R/library", &index).ok());
  std::vector<std::string> names;
  for (const auto& [name, package] : index.packages()) names.push_back(name);
  EXPECT_THAT(names, ElementsAre("Matrix", "data.table", "jsonlite", "stats"));
  ASSERT_NE(index.Find("jsonlite"), nullptr);
  EXPECT_EQ(index.Find("jsonlite")->version, "1.8.4");  // the first library's, as R's search finds it
  EXPECT_EQ(index.Find("jsonlite")->folder, "/usr/lib/R/site-library");
  EXPECT_EQ(index.Find("matrix"), nullptr);  // R's names are case-sensitive
  EXPECT_EQ(index.Find("data-table"), nullptr);

  std::vector<skills::Requirement> needs;
  for (const char* r : {"jsonlite>=99", "data.table>=1.14.8", "Matrix>=1.5-4", "cubicleNoSuchPackage", "matrix"}) {
    absl::StatusOr<skills::Requirement> parsed = skills::ParseRequirement(r, skills::PackageKind::kR);
    ASSERT_TRUE(parsed.ok()) << r;
    needs.push_back(*parsed);
  }
  std::vector<UnmetRequirement> unmet = UnmetRequirements(needs, {&index}, skills::PackageKind::kR);
  std::vector<std::string> messages;
  for (const UnmetRequirement& u : unmet) messages.push_back(u.message);
  EXPECT_THAT(messages, ElementsAre("package jsonlite not available (need >= 99, have 1.8.4)",
                                    "package Matrix not available (need >= 1.5-4, have 1.5-3)",
                                    "package cubicleNoSuchPackage not available (not installed)",
                                    "package matrix not available (not installed)"));
  EXPECT_THAT(std::string(ScanRLibrary(Path("absent"), "/x", &index).message()), HasSubstr("absent"));
}

TEST(HostPython, InterpretersAreFoundByNameAndResolved) {
  for (const char* name : {"python", "python3", "python3.11", "python3.11-config", "python3-config", "pip", "pip3",
                           "pip3.11", "R", "Rscript"}) {
    EXPECT_TRUE(IsInterpreterName(name)) << name;
  }
  for (const char* name : {"python-argcomplete-tcsh", "pythonista", "python3.x", "pipx", "r", "Rscript2", "pydoc3"}) {
    EXPECT_FALSE(IsInterpreterName(name)) << name;
  }
  test_support::TempDir dir;
  const std::string bin = dir.Join("bin"), local = dir.Join("local");
  fs::create_directories(bin);
  fs::create_directories(local);
  std::ofstream(bin + "/python3.11") << "x";
  std::ofstream(bin + "/Rscript") << "x";
  std::ofstream(bin + "/python3-tool") << "x";
  fs::create_symlink("python3.11", bin + "/python3");
  fs::create_symlink(bin + "/python3.11", local + "/python3");  // the same file again
  fs::create_symlink("missing", bin + "/pip");                  // dangling: nothing to mask
  fs::create_directories(dir.Join("prefix/lib/python3.11/site-packages"));
  fs::create_directories(dir.Join("prefix/lib/python3/dist-packages"));
  HostPython host = FindHostPython({local, bin}, {dir.Join("prefix")});
  EXPECT_THAT(host.interpreter_files, ElementsAre(bin + "/python3.11", bin + "/Rscript"));
  EXPECT_EQ(host.python_version, "3.11");
  EXPECT_THAT(host.site_folders,
              ElementsAre(dir.Join("prefix/lib/python3/dist-packages"),
                          dir.Join("prefix/lib/python3.11/site-packages")));
}

}  // namespace
}  // namespace cubicle::environments
