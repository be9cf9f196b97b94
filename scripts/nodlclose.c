/* nodlclose.c — preloaded by scripts/sanitize.sh: dlclose does nothing, so shared objects stay mapped until exit.
 *
 * Open MPI loads its components (mca_*.so) with dlopen and unloads them in MPI_Finalize, and keeps some of their
 * allocations until exit. LeakSanitizer reports at exit, when those components are gone: their stack frames read
 * "<unknown module>" and no suppression can name them. With the modules still mapped, the frames name mca_*.so and
 * scripts/lsan.supp suppresses them, so llm4d's own leaks stay visible without slow DWARF unwinding of every malloc
 * (which made the suite several times slower). Nothing of llm4d calls dlclose. */
int dlclose(void *handle);

int dlclose(void *handle) {
    (void)handle;
    return 0;
}
