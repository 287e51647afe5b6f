/* i.MX RT1062 boot header for a FlexSPI NOR (XIP) image (Teensy 4.1: 8 MiB QSPI flash, a Winbond
 * W25Q64JV, at 0x60000000). Our own structs, written from the i.MX RT1060 reference manual's System
 * Boot chapter (FlexSPI NOR configuration block, Image Vector Table, Boot Data) and the flash's
 * datasheet. The linker script (imxrt1062.ld) places them in section .boot_hdr:
 *
 *   0x60000000  FlexSPI NOR configuration block (FCFB, 512 bytes): how the boot ROM talks to the
 *               flash (read command sequence, pads, clock, size); the ROM keeps using it for XIP.
 *   0x60001000  Image Vector Table (IVT, 32 bytes): entry point, boot data, its own address.
 *   0x60001020  Boot Data: where the image lies (0x60000000) and how long it is; no plugin.
 *   0x60002000  sections.ld's .text: our vector table, code, constants (the .data image last).
 *
 * The ROM jumps to the IVT's entry with its own stack and vector table still in place, so the
 * entry is qe_imxrt_entry() (port.c), which sets VTOR and the stack pointer from our vector table
 * and only then jumps to its reset handler (the shared Reset_Handler). */
#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------- FlexSPI NOR configuration */
/* FlexSPI LUT instructions: two 16-bit instructions per word (the first in the low half), each
 * opcode[15:10] | number of pads (0: 1, 1: 2, 2: 4)[9:8] | operand[7:0]. */
#define LUT_CMD_SDR 0x01u
#define LUT_RADDR_SDR 0x02u
#define LUT_MODE8_SDR 0x07u
#define LUT_READ_SDR 0x09u
#define LUT_DUMMY_SDR 0x0Cu
#define LUT_STOP 0x00u
#define PADS_1 0u
#define PADS_4 2u
#define LUT_INSTR(op, pads, operand) ((uint32_t)(((op) << 10) | ((pads) << 8) | (operand)))
#define LUT_PAIR(op0, pads0, arg0, op1, pads1, arg1) \
    (LUT_INSTR(op0, pads0, arg0) | (LUT_INSTR(op1, pads1, arg1) << 16))

struct qe_flexspi_nor_config {
    /* The generic FlexSPI memory part (448 bytes). */
    uint32_t tag;                       /* 0x000 'FCFB' */
    uint32_t version;                   /* 0x004 'V' major minor bugfix, stored 0x56MMmmbb */
    uint32_t reserved0;                 /* 0x008 */
    uint8_t read_sample_clk_src;        /* 0x00C 0: internal loopback, 1: loopback from DQS pad */
    uint8_t cs_hold_time;               /* 0x00D serial clock cycles */
    uint8_t cs_setup_time;              /* 0x00E */
    uint8_t column_address_width;       /* 0x00F 0 for serial NOR */
    uint8_t device_mode_cfg_enable;     /* 0x010 */
    uint8_t device_mode_type;           /* 0x011 */
    uint16_t wait_time_cfg_commands;    /* 0x012 */
    uint32_t device_mode_seq;           /* 0x014 */
    uint32_t device_mode_arg;           /* 0x018 */
    uint8_t config_cmd_enable;          /* 0x01C */
    uint8_t config_mode_type[3];        /* 0x01D */
    uint32_t config_cmd_seqs[3];        /* 0x020 */
    uint32_t reserved1;                 /* 0x02C */
    uint32_t config_cmd_args[3];        /* 0x030 */
    uint32_t reserved2;                 /* 0x03C */
    uint32_t controller_misc_option;    /* 0x040 */
    uint8_t device_type;                /* 0x044 1: serial NOR */
    uint8_t sflash_pad_type;            /* 0x045 1, 2, 4 or 8 data pads */
    uint8_t serial_clk_freq;            /* 0x046 1: 30 MHz, 2: 50, 3: 60, 4: 75, 5: 80, 6: 100 */
    uint8_t lut_custom_seq_enable;      /* 0x047 */
    uint32_t reserved3[2];              /* 0x048 */
    uint32_t sflash_a1_size;            /* 0x050 bytes behind chip select A1 */
    uint32_t sflash_a2_size;            /* 0x054 */
    uint32_t sflash_b1_size;            /* 0x058 */
    uint32_t sflash_b2_size;            /* 0x05C */
    uint32_t cs_pad_setting_override;   /* 0x060 0: the ROM's pad settings */
    uint32_t sclk_pad_setting_override; /* 0x064 */
    uint32_t data_pad_setting_override; /* 0x068 */
    uint32_t dqs_pad_setting_override;  /* 0x06C */
    uint32_t timeout_ms;                /* 0x070 */
    uint32_t command_interval;          /* 0x074 */
    uint16_t data_valid_time[2];        /* 0x078 */
    uint16_t busy_offset;               /* 0x07C */
    uint16_t busy_bit_polarity;         /* 0x07E */
    uint32_t lookup_table[64];          /* 0x080 16 sequences of 4 words; sequence 0 = read */
    uint32_t lut_custom_seq[12];        /* 0x180 */
    uint32_t reserved4[4];              /* 0x1B0 */
    /* The serial NOR part (64 bytes). */
    uint32_t page_size;                 /* 0x1C0 */
    uint32_t sector_size;               /* 0x1C4 */
    uint8_t ipcmd_serial_clk_freq;      /* 0x1C8 same coding as serial_clk_freq */
    uint8_t is_uniform_block_size;      /* 0x1C9 */
    uint8_t reserved5[2];               /* 0x1CA */
    uint8_t serial_nor_type;            /* 0x1CC */
    uint8_t need_exit_no_cmd_mode;      /* 0x1CD */
    uint8_t half_clk_for_non_read_cmd;  /* 0x1CE */
    uint8_t need_restore_no_cmd_mode;   /* 0x1CF */
    uint32_t block_size;                /* 0x1D0 */
    uint32_t reserved6[11];             /* 0x1D4 */
};

/* The layout is the ROM's, not ours to choose: check it at compile time. */
#define QE_CHECK(name, cond) typedef char qe_check_##name[(cond) ? 1 : -1]
QE_CHECK(fcfb_size, sizeof(struct qe_flexspi_nor_config) == 512);
QE_CHECK(fcfb_clk, offsetof(struct qe_flexspi_nor_config, serial_clk_freq) == 0x46);
QE_CHECK(fcfb_a1, offsetof(struct qe_flexspi_nor_config, sflash_a1_size) == 0x50);
QE_CHECK(fcfb_lut, offsetof(struct qe_flexspi_nor_config, lookup_table) == 0x80);
QE_CHECK(fcfb_page, offsetof(struct qe_flexspi_nor_config, page_size) == 0x1C0);
QE_CHECK(fcfb_block, offsetof(struct qe_flexspi_nor_config, block_size) == 0x1D0);

#define FLASH_BYTES (8u * 1024u * 1024u)   /* Teensy 4.1: W25Q64JV, 64 Mbit */

extern const struct qe_flexspi_nor_config qe_flexspi_nor_config;
__attribute__((section(".boot_hdr.fcfb"), used))
const struct qe_flexspi_nor_config qe_flexspi_nor_config = {
    .tag = 0x42464346u,                 /* the bytes 'F' 'C' 'F' 'B' */
    .version = 0x56010000u,             /* V1.0.0: every field used here exists since 1.0 */
    .read_sample_clk_src = 1u,          /* loopback from the DQS pad (the ROM's usual choice) */
    .cs_hold_time = 3u,
    .cs_setup_time = 3u,
    .device_type = 1u,                  /* serial NOR */
    .sflash_pad_type = 4u,              /* quad */
    .serial_clk_freq = 3u,              /* 60 MHz: well inside the W25Q64JV's 133 MHz */
    .sflash_a1_size = FLASH_BYTES,
    /* Sequence 0, what the ROM and the XIP (AHB) reads use: W25Q64JV "Fast Read Quad I/O" EBh =
     * instruction on 1 line; 24-bit address on 4 lines; mode byte M7-0 on 4 lines (2 clocks),
     * sent as 0x00 so the flash never enters its continuous-read mode; 4 dummy clocks; data on
     * 4 lines. (The W25Q64JV-IQ ships with its Quad Enable bit set.) */
    .lookup_table = {
        [0] = LUT_PAIR(LUT_CMD_SDR, PADS_1, 0xEBu, LUT_RADDR_SDR, PADS_4, 24u),
        [1] = LUT_PAIR(LUT_MODE8_SDR, PADS_4, 0x00u, LUT_DUMMY_SDR, PADS_4, 4u),
        [2] = LUT_PAIR(LUT_READ_SDR, PADS_4, 4u, LUT_STOP, PADS_1, 0u),
        /* Sequence 1: read status register 1 (05h), for the ROM's flash driver. */
        [4] = LUT_PAIR(LUT_CMD_SDR, PADS_1, 0x05u, LUT_READ_SDR, PADS_1, 4u),
    },
    .page_size = 256u,
    .sector_size = 4096u,
    .ipcmd_serial_clk_freq = 1u,        /* 30 MHz for the ROM's non-read commands */
    .block_size = 65536u,
};

/* ---------------------------------------------------------------------- IVT and boot data */
struct qe_imx_ivt {
    uint32_t header;        /* tag 0xD1, length 0x0020 (big-endian), version 0x41 */
    uint32_t entry;         /* where the ROM jumps (Thumb address) */
    uint32_t reserved1;
    uint32_t dcd;           /* device configuration data: none */
    uint32_t boot_data;     /* address of struct qe_imx_boot_data */
    uint32_t self;          /* address of this IVT */
    uint32_t csf;           /* command sequence file (signed images): none */
    uint32_t reserved2;
};

struct qe_imx_boot_data {
    uint32_t start;         /* image start: the flash base, so the ROM runs it in place */
    uint32_t size;          /* image length in bytes, from the start */
    uint32_t plugin;        /* 0: a normal image, not a ROM plugin */
    uint32_t reserved;
};

QE_CHECK(ivt_size, sizeof(struct qe_imx_ivt) == 32);

#define IVT_HEADER 0x412000D1u   /* bytes D1 00 20 41 */

void qe_imxrt_entry(void);       /* port.c */
extern const char __qe_imxrt_image_size[];   /* imxrt1062.ld: an absolute symbol (a size) */

extern const struct qe_imx_boot_data qe_imx_boot_data;
extern const struct qe_imx_ivt qe_imx_ivt;

__attribute__((section(".boot_hdr.boot_data"), used))
const struct qe_imx_boot_data qe_imx_boot_data = {
    .start = 0x60000000u,
    .size = (uint32_t)(uintptr_t)__qe_imxrt_image_size,
    .plugin = 0u,
    .reserved = 0xFFFFFFFFu,
};

__attribute__((section(".boot_hdr.ivt"), used))
const struct qe_imx_ivt qe_imx_ivt = {
    .header = IVT_HEADER,
    .entry = (uint32_t)(uintptr_t)qe_imxrt_entry,
    .dcd = 0u,
    .boot_data = (uint32_t)(uintptr_t)&qe_imx_boot_data,
    .self = (uint32_t)(uintptr_t)&qe_imx_ivt,
    .csf = 0u,
};
