/* fmnist_report: progress, results, metrics.csv and curves.png
 * (fmnist_report.h). */
#include "fmnist_report.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

double fm_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

/* ---- progress ----------------------------------------------------------------- */

void fm_progress_begin(fm_progress *p, FILE *to, int epoch, int epochs, int64_t total,
                       int64_t images_left_after) {
  *p = (fm_progress){.to = to,
                     .tty = isatty(fileno(to)),
                     .epoch = epoch,
                     .epochs = epochs,
                     .total = total,
                     .images_left_after = images_left_after,
                     .start_us = fm_now_us()};
}

static void format_eta(double s, char *buf, size_t len) {
  long t = (long)(s + 0.5);
  snprintf(buf, len, "%ld:%02ld", t / 60, t % 60);
}

void fm_progress_update(fm_progress *p, int64_t images, double loss, double accuracy) {
  if (!p->tty) return;
  double now = fm_now_us();
  if (images < p->total && now - p->last_draw_us < 100e3) return;
  p->last_draw_us = now;
  p->images = images;
  double secs = (now - p->start_us) * 1e-6, rate = secs > 0 ? (double)images / secs : 0.0;
  char eta[32] = "-:--";
  if (rate > 0)
    format_eta((double)(p->total - images + p->images_left_after) / rate, eta, sizeof eta);
  enum { WIDTH = 24 };
  char bar[WIDTH + 1];
  int filled = (int)((double)WIDTH * (double)images / (double)p->total);
  for (int i = 0; i < WIDTH; i++) bar[i] = i < filled ? '#' : '.';
  bar[WIDTH] = '\0';
  fprintf(p->to, "\repoch %2d/%d [%s] %3d%%  loss %.4f  acc %5.2f%%  %6.0f img/s  ETA %s\033[K",
          p->epoch, p->epochs, bar, (int)(100 * images / p->total), loss, 100 * accuracy, rate,
          eta);
  fflush(p->to);
}

void fm_progress_end(fm_progress *p, const fm_epoch *e) {
  fprintf(p->to,
          "%sepoch %2d/%d  loss %.4f  acc %5.2f%%  test loss %.4f  test acc %5.2f%%  "
          "%6.0f img/s  %.1f s\n",
          p->tty ? "\r\033[K" : "", e->epoch, p->epochs, e->train_loss, 100 * e->train_accuracy,
          e->test_loss, 100 * e->test_accuracy, e->images_per_s, e->seconds);
  fflush(p->to);
}

/* ---- results --------------------------------------------------------------------- */

void fm_print_results(FILE *to, const fm_eval *ev) {
  fprintf(to, "\ntest accuracy: %.2f%% (%lld images), test loss %.4f\n\n", 100 * ev->accuracy,
          (long long)ev->n, ev->loss);
  fprintf(to, "  %-12s %8s %8s\n", "class", "images", "accuracy");
  for (int c = 0; c < FM_CLASSES; c++) {
    int64_t n = 0;
    for (int k = 0; k < FM_CLASSES; k++) n += ev->confusion[c][k];
    fprintf(to, "  %-12s %8lld %7.2f%%\n", fm_class_names[c], (long long)n,
            n ? 100.0 * (double)ev->confusion[c][c] / (double)n : 0.0);
  }
  /* Columns are labelled by the first letters of the names: the full
   * names are too wide for ten columns. */
  fprintf(to, "\nconfusion matrix (rows: true class, columns: predicted)\n  %-12s", "");
  for (int k = 0; k < FM_CLASSES; k++) fprintf(to, " %5.5s", fm_class_names[k]);
  fputc('\n', to);
  for (int c = 0; c < FM_CLASSES; c++) {
    fprintf(to, "  %-12s", fm_class_names[c]);
    for (int k = 0; k < FM_CLASSES; k++) fprintf(to, " %5lld", (long long)ev->confusion[c][k]);
    fputc('\n', to);
  }
}

int fm_write_metrics(const char *path, const fm_epoch *e, int n, char *err, size_t errlen) {
  FILE *f = fopen(path, "w");
  if (!f) {
    snprintf(err, errlen, "%s: cannot create: %s", path, strerror(errno));
    return -1;
  }
  fprintf(f, "epoch,train_loss,train_accuracy,test_loss,test_accuracy,images_per_s,seconds\n");
  for (int i = 0; i < n; i++)
    fprintf(f, "%d,%.6f,%.6f,%.6f,%.6f,%.1f,%.3f\n", e[i].epoch, e[i].train_loss,
            e[i].train_accuracy, e[i].test_loss, e[i].test_accuracy, e[i].images_per_s,
            e[i].seconds);
  if (fclose(f)) {
    snprintf(err, errlen, "%s: cannot write: %s", path, strerror(errno));
    return -1;
  }
  return 0;
}

/* ---- curves.png ------------------------------------------------------------------- */

/* Is there an executable named prog on PATH? */
static int on_path(const char *prog) {
  const char *path = getenv("PATH");
  if (!path) return 0;
  char dir[4096];
  while (*path) {
    size_t n = strcspn(path, ":");
    snprintf(dir, sizeof dir, "%.*s/%s", (int)(n ? n : 1), n ? path : ".", prog);
    if (access(dir, X_OK) == 0) return 1;
    path += n + (path[n] == ':');
  }
  return 0;
}

/* Write s into a gnuplot string literal (single quotes: only ' itself is
 * special, doubled). */
static void put_quoted(FILE *f, const char *s) {
  fputc('\'', f);
  for (; *s; s++) {
    if (*s == '\'') fputc('\'', f);
    fputc(*s, f);
  }
  fputc('\'', f);
}

int fm_plot_curves(const char *csv, const char *png, const char *title, int epochs, char *err,
                   size_t errlen) {
  if (!on_path("gnuplot")) return 1;
  FILE *g = popen("gnuplot", "w");
  if (!g) {
    snprintf(err, errlen, "cannot run gnuplot: %s", strerror(errno));
    return -1;
  }
  fputs("set terminal pngcairo size 1100,440 font 'sans,10'\nset output ", g);
  put_quoted(g, png);
  /* An explicit x range: one epoch is one point, which gnuplot's
   * autoscale would call an empty range. */
  fprintf(g,
          "\nset datafile separator ','\nset grid\nset xlabel 'epoch'\nset xrange [0.5:%g]\n"
          "set xtics %d\nset multiplot layout 1,2 title ",
          epochs + 0.5, epochs > 20 ? (epochs + 9) / 10 : 1);
  put_quoted(g, title);
  fputs("\nset title 'loss (softmax cross-entropy)'\nset ylabel 'loss'\nplot ", g);
  put_quoted(g, csv);
  fputs(" using 1:2 with linespoints lw 2 title 'train', '' using 1:4 with linespoints lw 2 "
        "title 'test'\n"
        "set title 'accuracy'\nset ylabel 'accuracy (%)'\nset key bottom right\nplot ",
        g);
  put_quoted(g, csv);
  fputs(" using 1:($3*100) with linespoints lw 2 title 'train', '' using 1:($5*100) with "
        "linespoints lw 2 title 'test'\nunset multiplot\n",
        g);
  int st = pclose(g);
  if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    snprintf(err, errlen, "gnuplot failed (status %d) drawing %s", st == -1 ? -1 : WEXITSTATUS(st),
             png);
    return -1;
  }
  return 0;
}
