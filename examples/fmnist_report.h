/* fmnist_report: what examples/fashion_mnist.c shows a person: the
 * progress of an epoch (a bar redrawn in place on a terminal, one line per
 * epoch otherwise), the results (accuracy per class, the confusion matrix
 * with the class names), metrics.csv and curves.png (drawn by gnuplot). */
#ifndef GRAFT_EXAMPLES_FMNIST_REPORT_H
#define GRAFT_EXAMPLES_FMNIST_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "fmnist_model.h"

/* One epoch's figures (a row of metrics.csv). */
typedef struct fm_epoch {
  int epoch;
  double train_loss, train_accuracy; /* over the epoch's steps */
  double test_loss, test_accuracy;
  double images_per_s; /* training images per second of the epoch */
  double seconds;      /* the epoch's training time */
} fm_epoch;

typedef struct fm_progress {
  FILE *to;
  int tty; /* redraw a bar in place */
  int epoch, epochs;
  int64_t images, total;     /* this epoch: done, all */
  int64_t images_left_after; /* images of the epochs after this one */
  double start_us, last_draw_us;
} fm_progress;

double fm_now_us(void);

/* Start an epoch of total images (images_left_after in later epochs). */
void fm_progress_begin(fm_progress *p, FILE *to, int epoch, int epochs, int64_t total,
                       int64_t images_left_after);
/* images done so far this epoch, their mean loss and accuracy; redraws the
 * bar at most every 100 ms (terminal only). */
void fm_progress_update(fm_progress *p, int64_t images, double loss, double accuracy);
/* The epoch's line (the bar's final state on a terminal). */
void fm_progress_end(fm_progress *p, const fm_epoch *e);

/* Test accuracy, accuracy per class and the confusion matrix. */
void fm_print_results(FILE *to, const fm_eval *ev);

/* Write the epochs to path as CSV; 0 or -1 with err. */
int fm_write_metrics(const char *path, const fm_epoch *e, int n, char *err, size_t errlen);

/* Draw curves.png from metrics.csv (epochs rows) with gnuplot.  1: gnuplot
 * is not installed (nothing drawn); 0: drawn; -1: gnuplot failed (err). */
int fm_plot_curves(const char *csv, const char *png, const char *title, int epochs, char *err,
                   size_t errlen);

#endif /* GRAFT_EXAMPLES_FMNIST_REPORT_H */
